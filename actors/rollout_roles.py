"""Assembles the roles on their placement groups (on the cluster ray_cluster.py connects to): start the agent and
user-simulator pools, the stats and controller actors and the trainer; grow and shrink the elastic user pool;
stop everything. The only place that creates actors; the loop (sead_ray.training.loop) sees `TrainingSystem`.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Optional

import ray

from actors.agent import AgentActor, AgentPool
from actors.engine_sizing import engine_spec_from_config
from actors.profile_controller import ProfileControllerActor
from actors.stats import StatsActor
from actors.user import UserActor, UserPool
from placement import (
    RolePlacement,
    actor_options,
    add_actor_group,
    bundle_for,
    create_placement_groups,
    free_resources,
    remove_actor_group,
    remove_placement_groups,
    user_engine_count,
)
from sead_ray.agent.backends import agent_backend
from sead_ray.core.config import SeadConfig
from sead_ray.core.models import resolve_model, swappable_weights
from sead_ray.play.rollout import RolloutEndpoints
from sead_ray.scenario.scenario import Scenario
from sead_ray.user.simulators import user_on_engine

log = logging.getLogger(__name__)

@dataclass
class RolloutRoles:
    """The rollout side of the system, started once per run."""
    cfg: SeadConfig
    scenario: Scenario
    agents: AgentPool
    users: UserPool
    stats: Any = None
    controller: Any = None
    tokenizer: Any = None
    plan: dict[str, RolePlacement] = field(default_factory=dict)
    startup: dict = field(default_factory=dict)
    user_path: str = ""            # the user model's folder ("" for the rule back-end)
    agent_path: str = ""           # the model the agent engines start from ("" for an endpoint agent)
    run: str = ""                  # the run's name, a tag of every engine gauge
    agent_endpoint: Any = None     # an agent behind an OpenAI-compatible endpoint instead of engines
    restarts: dict[str, int] = field(default_factory=lambda: {"agent": 0, "user": 0})

    def engine_spec(self, role: str, model_path: str, seed: int, bind: str, name: str):
        spec = engine_spec_from_config(self.cfg, role, model_path, seed, bind)
        spec.metrics_tags = {"run": self.run, "role": role, "engine": name}
        return spec

    def pool(self, role: str) -> Any:
        """The engine pool of `role` (agent, user)."""
        return {"agent": self.agents, "user": self.users}[role]

    def health(self) -> dict[str, dict]:
        """Per role: engines alive, dead, and replaced so far (the gauges of StatsActor.record_roles)."""
        return {role: {"alive": len(self.pool(role).alive), "dead": len(self.pool(role).dead),
                       "restarts": self.restarts[role]} for role in ("agent", "user")}

    @property
    def agent(self) -> Any:
        """The first agent engine's actor."""
        return next(iter(self.agents.actors.values()))

    def endpoints(self) -> RolloutEndpoints:
        user_engines = len(self.users.actors) if user_on_engine(self.cfg.user) else 0
        return RolloutEndpoints(self.agent_endpoint or self.agents, self.users, self.tokenizer,
                                len(self.agents.actors) + user_engines)


def _engine_bind(cfg: SeadConfig, index: int) -> str:
    if cfg.engine.cpu_bind in ("nobind", "auto"):
        return cfg.engine.cpu_bind
    return str(index % (os.cpu_count() or 1))


async def start_rollout_roles(cfg: SeadConfig, scenario: Scenario, agent_model: str, run_dir: Optional[Path] = None,
                              *, with_controller: bool = False, with_stats: bool = True,
                              trainer_workers: int = 0, first_iteration: int = 1,
                              user_model: Optional[str] = None,
                              beside: Optional[Callable[[RolloutRoles, list, list], Awaitable[Any]]] = None,
                              ) -> RolloutRoles:
    """Placement groups, then the actors: agent engine, user simulator pool, stats, controller. With
    `trainer_workers`, the cluster must also hold the trainer (placed later by Ray Train): checked
    here, before any engine starts. `beside(roles, agent_actors, user_actors)` runs while the engines
    start (the trainers' start-up: the two loads overlap instead of adding up); it raises after both
    ended, so that its caller can stop what it started."""
    from transformers import AutoTokenizer

    backend = agent_backend(agent_model)   # a model on this run's engines, or one played without an engine here
    agent_path = str(resolve_model(agent_model)) if backend.on_engine else ""
    # `user_model`: a resumed run whose simulator is trained too (its checkpoint's user/hf)
    user_path = str(resolve_model(user_model or cfg.models.user)) if user_on_engine(cfg.user) else ""
    n_agent, n_user = 0 if agent_path == "" else cfg.agent.engines, user_engine_count(cfg, ray.cluster_resources())
    counts = {"agent": n_agent, "user": n_user, "stats": int(with_stats), "controller": int(with_controller),
              "trainer": trainer_workers}
    plan = create_placement_groups(cfg, counts)
    log.info("placement: %s", "; ".join(f"{r}: {rp.describe()}" for r, rp in plan.items()))

    timeout = cfg.engine.request_timeout_s
    roles = RolloutRoles(cfg, scenario, AgentPool({}, max_restarts=cfg.agent.max_restarts, request_timeout_s=timeout),
                         UserPool({}, max_restarts=cfg.user.max_restarts, request_timeout_s=timeout),
                         plan=plan, user_path=user_path, run=Path(run_dir).name if run_dir else "", agent_path=agent_path)
    roles.users.restart_fn = partial(restart_engine, roles, "user")
    roles.agents.restart_fn = partial(restart_engine, roles, "agent")
    agents = [launch_agent(roles, i) for i in range(n_agent)]
    users = [launch_user(roles, i) for i in range(n_user)]
    t0 = time.perf_counter()
    log.info("starting %d engine(s): agent %s x %d; user simulator %s x %d", n_agent + (n_user if user_path else 0),
             agent_model, n_agent, cfg.models.user if user_path else "rule", n_user)
    async def engines() -> list:
        started = await asyncio.gather(*(start_engine(cfg, a) for a in [*agents, *users]))
        log.info("engines ready in %.0f s", time.perf_counter() - t0)
        return started
    side = beside(roles, agents, users) if beside is not None else asyncio.sleep(0)
    started, side_result = await asyncio.gather(engines(), side, return_exceptions=True)
    for outcome in (started, side_result):
        if isinstance(outcome, BaseException):
            for handle in [*agents, *users]:   # nothing of this start-up outlives it
                ray.kill(handle, no_restart=True)
            remove_placement_groups(plan)
            raise outcome
    for index, (actor, info) in enumerate(zip(agents, started[:n_agent])):
        roles.agents.add(engine_name("agent", index), actor, {**info, "placement_index": index})
    for index, (actor, info) in enumerate(zip(users, started[n_agent:])):
        roles.users.add(engine_name("user", index), actor, {**info, "placement_index": index})
    roles.startup = {"user": started[n_agent:]}     # and "agent": its engine's, script's or endpoint's
    if backend.build is not None:
        roles.agent_endpoint, roles.startup["agent"] = await backend.build(cfg, scenario, agent_model)
        log.info("agent: %s (%s)", agent_model, ", ".join(f"{k}: {v}" for k, v in roles.startup["agent"].items()))
    else:
        roles.startup["agent"] = started[0]
        roles.tokenizer = AutoTokenizer.from_pretrained(agent_path)
    if with_stats:
        roles.stats = _start_stats(roles, run_dir, first_iteration)
    if with_controller:
        roles.controller = ProfileControllerActor.options(**actor_options(plan, "controller", 0)).remote(
            scenario, cfg.curriculum, cfg.seed)
    return roles


def _start_stats(roles: RolloutRoles, run_dir: Path, first_iteration: int = 1) -> Any:
    # Ray restarts a dead stats actor in its bundle and retries the call: it reopens the same files and
    # appends on (its gauges are set again by the next row)
    return StatsActor.options(max_restarts=3, max_task_retries=2, **actor_options(roles.plan, "stats", 0)).remote(
        str(run_dir), roles.scenario.schema, first_iteration=first_iteration)


async def switch_agent(roles: RolloutRoles, agent_model: str, run_dir: Path) -> bool:
    """Running rollout roles made to play `agent_model` into `run_dir` (compare's next agent): its weights
    loaded into the running agent engines, a stats actor of its own, the simulator pool kept as it runs.
    False when the engines cannot take them (no agent engine here, another architecture or tokenizer:
    models.swappable_weights, or a load that failed): the caller starts the roles anew."""
    from transformers import AutoTokenizer
    if not roles.agent_path or not agent_backend(agent_model).on_engine:
        return False
    path = resolve_model(agent_model)
    weights = swappable_weights(Path(roles.agent_path), path)
    if weights is None:
        return False
    await roles.agents.settle()
    try:
        await roles.agents.call_alive("load_weights_from_file", str(weights), 0)
    except Exception as exc:   # an engine died meanwhile: the pool is half switched, start anew
        log.warning("could not load %s into the running agent engines (%r): starting them anew", weights, exc)
        return False
    roles.agent_path = str(path)   # what a replacement engine starts from
    roles.tokenizer = AutoTokenizer.from_pretrained(path)
    if roles.stats is not None:
        await asyncio.gather(roles.stats.close.remote(), return_exceptions=True)
        ray.kill(roles.stats, no_restart=True)
        roles.stats = _start_stats(roles, run_dir)
    log.info("agent: %s, its weights loaded into the running engine(s) (one start for every checkpoint of a model)",
             agent_model)
    return True


async def start_engine(cfg: SeadConfig, actor: Any) -> dict:
    """An engine actor's start-up (model load, KV cache), bounded by `engine.start_timeout_s`."""
    try:
        return await asyncio.wait_for(actor.start.remote(), cfg.engine.start_timeout_s)
    except asyncio.TimeoutError:
        raise TimeoutError(f"an engine did not start within engine.start_timeout_s = {cfg.engine.start_timeout_s:.0f} s "
                           "(a model load that hangs, or no memory for its KV cache)") from None


def engine_name(role: str, index: int) -> str:
    """The name of `role`'s engine actor in bundle `index` of its placement group (agent-0, user-1, ...)."""
    return f"{role}-{index}"


def launch_agent(roles: RolloutRoles, index: int) -> Any:
    """Create (not yet start) the agent engine actor in bundle `index` of the agent role."""
    spec = roles.engine_spec("agent", roles.agent_path, roles.cfg.seed + 1000 * index,
                             _engine_bind(roles.cfg, index), engine_name("agent", index))
    return AgentActor.options(**actor_options(roles.plan, "agent", index)).remote(spec)


def launch_user(roles: RolloutRoles, index: int) -> Any:
    """Create (not yet start) the user simulator actor in bundle `index` of the user role."""
    cfg, name = roles.cfg, engine_name("user", index)
    spec = (roles.engine_spec("user", roles.user_path, cfg.seed + 1 + index,
                              _engine_bind(cfg, cfg.agent.engines + index), name)
            if roles.user_path else None)
    return UserActor.options(max_concurrency=1000, **actor_options(roles.plan, "user", index)).remote(
        name, roles.scenario, cfg.user, cfg.dialogue.user.as_params(), spec=spec,
        reply_max_chars=cfg.dialogue.user_reply_max_chars)


LAUNCH = {"agent": launch_agent, "user": launch_user}


async def restart_engine(roles: RolloutRoles, role: str, name: str) -> tuple[Any, dict]:
    """A dead engine's replacement (role `agent` or `user`), started in the same bundle of its placement
    group with the model on disk (a trained role brings it to its current weights: TrainedRole.restart)."""
    pool, launch = roles.pool(role), LAUNCH[role]
    index = pool.info[name]["placement_index"]
    ray.kill(pool.actors[name], no_restart=True)   # dead already, or alive with a dead engine
    actor = launch(roles, index)
    info = await start_engine(roles.cfg, actor)
    roles.restarts[role] += 1
    return actor, {**info, "placement_index": index}


async def rescale_user_pool(roles: RolloutRoles, timeout_s: float = 60.0) -> Optional[dict]:
    """`user.engines: auto`, between iterations: drop engines whose node left the cluster (or that
    died), then start one engine per unit of the rollout resource the pool does not use yet (nodes that
    joined). Returns {"before", "after", "removed", "added"} when the pool changed, else None."""
    cfg, pool = roles.cfg, roles.users
    if cfg.user.engines != "auto" or "user" not in roles.plan:
        return None
    rp = roles.plan["user"]
    await pool.settle()   # engines being restarted in their bundle are not removed from under the restart
    before = len(pool.actors)

    async def retire(name: str, graceful: bool) -> None:
        index = pool.info[name]["placement_index"]
        actor = pool.remove(name)
        if graceful:
            await asyncio.gather(actor.shutdown.remote(), return_exceptions=True)
        ray.kill(actor, no_restart=True)
        remove_actor_group(rp, index)

    alive_nodes = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
    removed = [name for name in list(pool.actors) if name in pool.dead or pool.info[name].get("node") not in alive_nodes]
    lost = len(removed)
    for name in removed:
        await retire(name, graceful=False)
    target = user_engine_count(cfg, ray.cluster_resources())
    while len(pool.actors) > target:   # the rollout resource shrank on a live node: retire the newest
        name = max(pool.actors, key=lambda n: pool.info[n]["placement_index"])
        await retire(name, graceful=True)
        removed.append(name)
    added = []
    while len(pool.actors) < target:
        index = add_actor_group(rp, bundle_for(cfg.placement.user), timeout_s)
        if index is None:
            log.warning("user simulator pool: the cluster offers %d rollout unit(s) but another engine could not be "
                        "placed within %.0f s (free: %s); keeping %d engine(s)", target, timeout_s, free_resources(),
                        len(pool.actors))
            break
        name, actor = engine_name("user", index), launch_user(roles, index)
        try:
            info = await start_engine(roles.cfg, actor)
        except Exception as exc:
            log.warning("user simulator %s failed to start (%s); keeping %d engine(s)", name, exc, len(pool.actors))
            ray.kill(actor, no_restart=True)
            remove_actor_group(rp, index)
            break
        pool.add(name, actor, {**info, "placement_index": index})
        added.append(name)
    roles.restarts["user"] += min(lost, len(added))   # an engine lost and one started in its place
    if not removed and not added:
        return None
    change = {"before": before, "after": len(pool.actors), "removed": removed, "added": added}
    log.info("user simulator pool: %d -> %d engine(s) (removed %s, added %s)", before, change["after"],
             removed or "none", added or "none")
    return change


async def shutdown_rollout_roles(roles: RolloutRoles) -> None:
    await asyncio.gather(roles.users.settle(), roles.agents.settle())   # a replacement would outlive its pool
    if roles.agent_endpoint is not None:
        await roles.agent_endpoint.close()
    await roles.users.shutdown()
    await roles.agents.shutdown()
    if roles.stats is not None:
        await asyncio.gather(roles.stats.close.remote(), return_exceptions=True)
    for handle in [roles.stats, roles.controller, *roles.agents.actors.values(), *roles.users.actors.values()]:
        if handle is not None:
            ray.kill(handle, no_restart=True)
    remove_placement_groups(roles.plan)


class EvaluationRoles:
    """The rollout roles of evaluations played one after another (compare's agents): kept running from one
    agent to the next, which takes its weights in the running agent engines when it can (checkpoints of one
    model: switch_agent), so the simulator pool and the engines start once."""

    def __init__(self, cfg: SeadConfig, scenario: Scenario):
        self.cfg, self.scenario, self.roles = cfg, scenario, None

    async def play(self, agent_model: str, out_dir: Path) -> RolloutRoles:
        if self.roles is None or not await switch_agent(self.roles, agent_model, out_dir):
            await self.close()
            self.roles = await start_rollout_roles(self.cfg, self.scenario, agent_model, out_dir)
        return self.roles

    async def close(self) -> None:
        if self.roles is not None:
            roles, self.roles = self.roles, None
            await shutdown_rollout_roles(roles)
