"""`sead-ray doctor` without a cluster: the lines, what a failure stops, the disk a run needs, and the parts that
fail before Ray starts (the whole check-up on a real cluster: tests/system/test_doctor.py)."""
import asyncio

import pytest

from sead_ray.cli.main import main
from sead_ray.runs.doctor import FIXES, PARTS, Checks, PartFailed, checkpoints_on_disk, gpus_asked, run_disk_bytes
from tests.conftest import EMBEDDED_CONFIG


def test_a_failed_part_names_its_fix_and_the_parts_after_it_are_not_checked():
    lines: list[str] = []
    checks = Checks(lines.append)

    async def engines() -> str:
        raise RuntimeError("engine died\n  while loading")

    async def run() -> None:
        assert await checks.run("config", lambda: "loaded")
        assert not await checks.run("engines", engines)
        assert not await checks.run("sync", lambda: "never called")
    asyncio.run(run())
    assert [c.status for c in checks.done] == ["ok", "FAIL", "not checked"]
    assert lines[1].startswith("FAIL engines") and "RuntimeError: engine died while loading" in lines[1]
    assert lines[1].endswith(f"-> fix: {FIXES['engines']}")
    assert lines[2] == "--   sync      needs engines"
    assert checks.failed.part == "engines" and "engines FAILED" in checks.summary(3.0)


def test_a_part_that_knows_its_fix_says_it():
    checks = Checks(lambda line: None)

    def gpus() -> str:
        raise PartFailed("no GPU seen", "start the containers with --gpus all")
    asyncio.run(checks.run("gpus", gpus))
    assert checks.failed.fix == "start the containers with --gpus all"
    assert checks.failed.detail == "no GPU seen"


def test_a_failure_that_does_not_block_lets_the_parts_after_it_run_and_still_fails_the_check_up():
    checks = Checks(lambda line: None)

    def storage() -> str:
        raise PartFailed("/data has 2.6 GiB free; the run's 4 checkpoints on disk at once need 10.0 GiB", blocks=False)

    async def run() -> None:
        assert await checks.run("ray", lambda: "1 node")
        assert not await checks.run("storage", storage)
        assert await checks.run("placement", lambda: "made")
        assert not await checks.run("engines", lambda: (_ for _ in ()).throw(RuntimeError("engine died")))
        assert not await checks.run("trainer", lambda: "never called")
    asyncio.run(run())
    assert [c.status for c in checks.done] == ["ok", "FAIL", "ok", "FAIL", "not checked"]
    assert checks.failed.part == "storage" and checks.blocking.part == "engines"
    assert checks.done[-1].detail == "needs engines"
    assert checks.summary(9.0).startswith("doctor: storage, engines FAILED (9 s): free the space")


def test_all_parts_pass_gives_a_passing_summary():
    checks = Checks(lambda line: None)

    async def run() -> None:
        for part in PARTS:
            await checks.run(part, lambda: "fine")
    asyncio.run(run())
    assert checks.failed is None and checks.summary(61.0) == f"doctor: all {len(PARTS)} parts work (61 s)"


@pytest.mark.parametrize("keep, iterations, every, warm_start, on_disk", [
    (2, 8, 1, "none", 3), (0, 10, 5, "none", 3), (0, 10, 0, "none", 2), (5, 3, 1, "none", 6),
    (2, 8, 1, "sop_rehearsal", 4)])   # iteration 0 of a warm start is never pruned
def test_checkpoints_on_disk(keep, iterations, every, warm_start, on_disk):
    from tests.conftest import tiny_config
    cfg = tiny_config(f"train.keep_checkpoints={keep}", f"train.iterations={iterations}",
                      f"train.checkpoint_every={every}", f"train.warm_start={warm_start}")
    assert checkpoints_on_disk(cfg) == on_disk


def test_run_disk_bytes_counts_weights_twice_and_adams_state_per_checkpoint():
    from tests.conftest import tiny_config
    cfg = tiny_config("train.keep_checkpoints=2", "models.dtype=bfloat16")
    # per parameter: the HF folder and DeepSpeed's module states (2 x 2 bytes) and fp32 master, m, v (12 bytes)
    from sead_ray.ops.model_shape import KNOWN_SHAPES
    model = KNOWN_SHAPES["Qwen2.5-0.5B-Instruct"]
    assert run_disk_bytes(cfg, [model]) == 3 * model.params * (2 * 2 + 12)
    assert run_disk_bytes(cfg, [model, model]) == 2 * run_disk_bytes(cfg, [model])   # a trained simulator too


def test_gpus_asked_names_the_roles_on_gpus():
    from tests.conftest import tiny_config
    assert gpus_asked(tiny_config()) == {}
    assert gpus_asked(tiny_config("placement.agent.gpus=1", "placement.trainer.gpus=1")) == {"agent": 1, "trainer": 1}


@pytest.mark.parametrize("override, failed", [("models.agent=/nonexistent/model", "models"),
                                              ("train.no_such_key=1", "config")])
def test_a_part_broken_before_ray_starts_is_exit_2_with_one_fail_line(override, failed, capsys, tmp_path):
    import ray
    assert main(["doctor", "--config", str(EMBEDDED_CONFIG), "--set", override, "--set", f"output_dir={tmp_path}"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out if line.startswith("FAIL")] == [failed]
    assert out[-1].startswith(f"doctor: {failed} FAILED")
    assert sum(line.startswith("--") for line in out) == len(PARTS) - 1 - PARTS.index(failed)
    assert not ray.is_initialized() and list(tmp_path.iterdir()) == []
