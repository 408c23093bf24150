"""Kill `sead-ray train` during iteration 2 (SIGKILL of its whole process group, Ray included),
resume it, and compare with an uninterrupted run of the same seed: the curriculum state entering
iteration 2 and iteration 2's profile draws must be identical."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import EMBEDDED_CONFIG, train_command

pytestmark = pytest.mark.slow


def _profiles(run, it):
    path = run / "dialogues" / f"iter_{it:04d}.jsonl"
    return [json.loads(line)["profile"] for line in path.read_text().splitlines()]


def _curriculum(run, it):
    return json.loads((run / "curriculum" / f"iter_{it:04d}.json").read_text())


# Larger than the two subprocess budgets below together, so a hang fails in a subprocess with its output.
@pytest.mark.timeout(2 * 900 + 300)
def test_killed_run_resumes_exactly(finished_run, tmp_path):
    full = finished_run.path   # the uninterrupted run of the same settings and seed
    assert "training finished after iteration 4 of 4" in finished_run.stdout
    assert "tensorboard --logdir" in finished_run.stdout
    # Run directories given relative to the working directory (Ray Train workers run elsewhere).
    killed = tmp_path / "killed"
    victim = subprocess.Popen(train_command("--config", EMBEDDED_CONFIG, "--out", "killed"), cwd=tmp_path,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 900
    # during iteration 2: the checkpoint of iteration 1 is written, iteration 2's curriculum is not (an
    # iteration of this tiny run takes a few seconds: poll often and kill at once)
    while not (killed / "checkpoints" / "latest").exists() and time.time() < deadline:
        assert victim.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert not (killed / "curriculum" / "iter_0002.json").exists()

    proc = subprocess.run([sys.executable, "-m", "sead_ray.cli.main", "train", "--resume", "killed"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _curriculum(killed, 1) == _curriculum(full, 1)        # the state entering iteration 2
    assert _profiles(killed, 2) == _profiles(full, 2)            # iteration 2 draws the same profiles
    rows = [json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if r["phase"] == "train"] == [1, 2, 3, 4]
    # no KL or entropy term in these settings: the logged loss is the policy-gradient loss, not a multiple
    assert all(r["train_loss"] == pytest.approx(r["train_pg_loss"], rel=1e-5, abs=1e-8) for r in rows
               if r["phase"] == "train"), rows
    ckpt = (killed / "checkpoints" / "latest").resolve()
    assert ckpt.name == "iter_0004" and (ckpt / "hf" / "config.json").exists()
    assert (ckpt / "deepspeed").is_dir() and (full / "checkpoints" / "iter_0001" / "hf" / "config.json").exists()
    # the finished run staged each checkpoint (train.checkpoint_staging_dir): all four complete in the run, with their
    # DeepSpeed state, and nothing left in staging
    staged = sorted((full / "checkpoints").glob("iter_*"))
    assert [p.name for p in staged] == [f"iter_{i:04d}" for i in range(1, 5)]
    assert all((p / "state.json").exists() and (p / "deepspeed").is_dir() for p in staged)
    assert list((full.parent / "staging" / "run").iterdir()) == []
