"""Scale-out check on a real multi-node Ray cluster (several raylets on this machine, through
`ray.cluster_utils.Cluster`): with `user.engines: auto` the user-simulator pool grows onto a
rollout node that joins and drops the engines of a node that leaves, between iterations.

Runs in its own process (it owns its Ray cluster); prints one JSON line that tests/system/test_elastic_pool.py
checks. The simulators use the `rule` back-end: the check is about placement, not about engines.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time

import numpy as np


def _turns(roles, scenario, n: int, tag: str) -> list[str]:
    """Play one user turn of `n` fresh dialogues through the pool; the engines that served them."""
    from sead_ray.scenario.profiles import sample_profiles
    from sead_ray.scenario.turn_protocol import UserRequest
    profiles = sample_profiles(scenario, n, np.random.default_rng(0), n_max=200)

    async def one(i, p):
        out = await roles.users.respond(UserRequest(f"{tag}-{i}", 0, p, ["Hello, is this a good time?"], [], i))
        roles.users.release(f"{tag}-{i}")
        return out.engine
    async def all_turns():
        return await asyncio.gather(*(one(i, p) for i, p in enumerate(profiles)))
    return sorted(set(asyncio.run(all_turns())))


def main() -> None:
    import ray
    from ray.cluster_utils import Cluster

    from actors.agent import AgentPool
    from actors.rollout_roles import RolloutRoles, engine_name, launch_user, rescale_user_pool
    from actors.user import UserPool
    from placement import create_placement_groups, user_engine_count
    from sead_ray.scenario.scenario import load_scenario
    from tests.conftest import SCENARIO, tiny_config

    cfg = tiny_config("user.backend=rule", "user.engines=auto", "placement.user.node_resource=rollout",
                      "placement.user.cpus=0.1")
    scenario = load_scenario(SCENARIO)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1, resources={"rollout": 1})
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    report: dict = {}
    try:
        n = user_engine_count(cfg, ray.cluster_resources())
        plan = create_placement_groups(cfg, {"user": n})
        roles = RolloutRoles(cfg, scenario, agents=AgentPool({}), users=UserPool({}), plan=plan)
        for i in range(n):
            actor = launch_user(roles, i)
            roles.users.add(engine_name("user", i), actor, {**ray.get(actor.start.remote()), "placement_index": i})
        report["start"] = {"engines": sorted(roles.users.actors), "served": _turns(roles, scenario, 4, "a")}

        joined = cluster.add_node(num_cpus=1, resources={"rollout": 2})
        cluster.wait_for_nodes()
        report["grow"] = asyncio.run(rescale_user_pool(roles, timeout_s=30))
        report["grow_served"] = _turns(roles, scenario, 12, "b")
        report["grow_nodes"] = len({roles.users.info[n]["node"] for n in roles.users.actors})
        report["unchanged"] = asyncio.run(rescale_user_pool(roles, timeout_s=30))

        cluster.remove_node(joined)
        for _ in range(60):   # the head notices a removed node within seconds
            if ray.cluster_resources().get("rollout", 0) <= 1:
                break
            time.sleep(1)
        report["shrink"] = asyncio.run(rescale_user_pool(roles, timeout_s=30))
        report["shrink_served"] = _turns(roles, scenario, 4, "c")
        report["groups_left"] = sum(g is not None for g in plan["user"].groups)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print("ELASTIC_POOL_REPORT " + json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
