"""Checkpoint bookkeeping of a run directory (pure files): `latest`, its fallback, retention, torn
metrics lines."""
import json
import os

from sead_ray.core.roles import ROLES
from sead_ray.training.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_train_state,
    prune_checkpoints,
    save_checkpoint,
    truncate_metrics,
)


def _save(run, iteration, keep=0):
    def weights(directory):
        (directory / "hf").mkdir(parents=True)
    return save_checkpoint(weights, run, TrainState(iteration, {"curriculum": iteration}, {"agent": iteration}), keep=keep)


def test_latest_names_the_newest_save_and_retention_keeps_k(tmp_path):
    for it in (1, 2, 3, 4):
        _save(tmp_path, it, keep=2)
    assert latest_checkpoint(tmp_path).name == "iter_0004"
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("iter_*")) == ["iter_0003", "iter_0004"]
    assert json.loads((tmp_path / "checkpoints" / "iter_0004" / "state.json").read_text())["iteration"] == 4


def test_versions_are_kept_per_role_and_a_state_written_before_the_roles_were_data_still_loads(tmp_path):
    saved = TrainState(3, {"curriculum": 3}, {"agent": 3, "user": 2})
    directory = save_checkpoint(lambda d: (d / "hf").mkdir(parents=True), tmp_path, saved)
    assert load_train_state(directory) == saved and saved.version("user") == 2
    # the state.json of a run written before this change: one field per role
    (directory / "state.json").write_text(json.dumps({"iteration": 3, "controller": {}, "policy_version": 3,
                                                      "user_policy_version": 2}))
    assert load_train_state(directory).versions == {"agent": 3, "user": 2}
    assert (ROLES["agent"].checkpoint(directory), ROLES["user"].checkpoint(directory)) == (directory, directory / "user")


def test_a_dangling_or_incomplete_latest_falls_back_to_the_newest_complete_checkpoint(tmp_path):
    for it in (1, 2):
        _save(tmp_path, it)
    link = tmp_path / "checkpoints" / "latest"
    link.unlink()
    os.symlink("iter_0009", link)                                  # deleted by hand
    assert latest_checkpoint(tmp_path).name == "iter_0002"
    (tmp_path / "checkpoints" / "iter_0003" / "hf").mkdir(parents=True)   # a save cut short: no state.json
    link.unlink()
    os.symlink("iter_0003", link)
    assert latest_checkpoint(tmp_path).name == "iter_0002"
    assert prune_checkpoints(tmp_path, keep=1) == [tmp_path / "checkpoints" / "iter_0001"]
    assert latest_checkpoint(tmp_path / "nothing-here") is None


def test_checkpoints_outside_the_run_directory_are_never_followed(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    _save(run, 1)
    _save(elsewhere, 7)   # a complete checkpoint, but not this run's: resuming would unpickle its state
    link = run / "checkpoints" / "latest"
    link.unlink()
    os.symlink(elsewhere / "checkpoints" / "iter_0007", link)
    os.symlink(elsewhere / "checkpoints" / "iter_0007", run / "checkpoints" / "iter_0009")
    assert latest_checkpoint(run) == (run / "checkpoints" / "iter_0001").resolve()


def test_metrics_rows_are_appended_whole(tmp_path):
    from sead_ray.core.jsonl import append_jsonl
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1}\n{"iterat')          # torn by an older writer
    append_jsonl(path, {"iteration": 2})
    assert path.read_text() == '{"iteration": 1}\n{"iterat\n{"iteration": 2}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]   # no temporary file left
    truncate_metrics(path, 5)
    assert [json.loads(line)["iteration"] for line in path.read_text().splitlines()] == [1, 2]


def test_truncating_metrics_drops_later_rows_and_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1}\n{"iteration": 2}\n{"iteration": 3}\n{"iterat')
    truncate_metrics(path, 2)
    assert [json.loads(line)["iteration"] for line in path.read_text().splitlines()] == [1, 2]


def test_a_run_directory_takes_one_live_run_at_a_time(tmp_path, capsys):
    import subprocess
    import sys

    import pytest

    from sead_ray.cli.main import main
    from sead_ray.core.config import dump_config, load_config
    from sead_ray.training.checkpoint import RunDirectoryBusy, run_dir_lock
    from tests.conftest import EMBEDDED_CONFIG
    run = tmp_path / "run"
    run.mkdir()
    dump_config(load_config(EMBEDDED_CONFIG), run / "config.yaml")
    with run_dir_lock(run):
        with pytest.raises(RunDirectoryBusy, match=f"pid {os.getpid()}"):
            with run_dir_lock(run):
                pass
        # the CLI refuses before Ray or any engine starts: exit 2 naming the holder
        assert main(["train", "--resume", str(run)]) == 2
        assert f"in use by a live run (pid {os.getpid()}" in capsys.readouterr().err
    with run_dir_lock(run):        # released at the end of the run
        pass
    # a holder that dies (kill -9) leaves nothing locked
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from sead_ray.training.checkpoint import run_dir_lock\n"
                               "with run_dir_lock(Path(sys.argv[1])):\n print('locked', flush=True); time.sleep(60)",
                               str(run)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(RunDirectoryBusy, match=f"pid {holder.pid}"):
        with run_dir_lock(run):
            pass
    holder.kill()
    holder.wait()
    with run_dir_lock(run):
        pass


def test_resume_refuses_to_change_what_the_checkpoints_were_made_with(tmp_path, capsys):
    from sead_ray.cli.main import main
    from sead_ray.core.config import dump_config, load_config
    from tests.conftest import EMBEDDED_CONFIG
    run = tmp_path / "run"
    run.mkdir()
    dump_config(load_config(EMBEDDED_CONFIG), run / "config.yaml")
    # refused before Ray or any engine starts, naming the key, the old and the new value
    assert main(["train", "--resume", str(run), "--set", "trainer.num_workers=4", "--set", "seed=9"]) == 2
    err = capsys.readouterr().err
    assert "cannot resume with seed 0 -> 9, trainer.num_workers 1 -> 4" in err and "Traceback" not in err
    # a new run into a directory that holds a run (started, or with checkpoints): refused too (it would mix two)
    assert main(["train", "--config", str(EMBEDDED_CONFIG), "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run} holds a run's files (config.yaml) but no complete checkpoint" in err and "Traceback" not in err
    save_checkpoint(lambda d: d.mkdir(parents=True), run, TrainState(1, {}, {"agent": 1}))
    assert main(["train", "--config", str(EMBEDDED_CONFIG), "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run} already holds a run with checkpoints" in err and "Traceback" not in err
