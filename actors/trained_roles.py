"""TrainingSystem: what the self-evolution loop drives on Ray (sead_ray.training.loop.LoopSystem): the rollout
roles of actors.rollout_roles, the profile controller and the trainer, behind plain async methods; and
the replacement of the roles that die during a run."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Optional

import ray

from actors.profile_controller import ProfileControllerActor
from actors.ray_cluster import unshared_run_dir_nodes
from actors.rollout_roles import (
    RolloutRoles,
    rescale_user_pool,
    restart_engine,
    shutdown_rollout_roles,
    start_rollout_roles,
)
from actors.routing import StickyRouter, actor_death_errors
from placement import actor_options
from sead_ray.core.config import ConfigError, SeadConfig
from sead_ray.core.models import resolve_model
from sead_ray.core.roles import ROLES, trained_roles
from sead_ray.play.rollout import RolloutEndpoints
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.state import State
from sead_ray.training.trainer_protocol import Sample, StepMetrics, SyncResult, TrainerError, WeightSyncFailed

log = logging.getLogger(__name__)


async def answer_within(ref: Any, timeout_s: float, what: str) -> Any:
    """Await an actor call for at most `timeout_s` (`ray.call_timeout_s`), with a message that says which."""
    try:
        return await asyncio.wait_for(ref, timeout_s)
    except asyncio.TimeoutError:
        raise TimeoutError(f"{what} did not answer within ray.call_timeout_s = {timeout_s:.0f} s") from None


@dataclass
class TrainedRole:
    """A role whose model is trained, and the whole trip of its weights: its engine pool, its trainer group
    and the one version counter (each GRPO step makes the next version; `publish` sends it to every live
    engine; an engine that dies is replaced and brought to the current version before it serves)."""
    name: str                 # agent, or user (user.train)
    pool: StickyRouter
    trainer: Any
    relaunch: Callable[[str], Awaitable[tuple]]   # a dead engine's replacement, with the model on disk
    version: int = 0

    def __post_init__(self):
        self.pool.restart_fn = self.restart

    async def restart(self, name: str) -> tuple:
        actor, info = await self.relaunch(name)
        await self.push_to(actor)
        return actor, info

    async def publish(self) -> SyncResult:
        """The trainer's weights, as the current version, to every live engine. An engine that died meanwhile
        is replaced (and given this version by `restart`) and the sync is done again for the new list; so is a
        sync after which an engine's weights differ from those sent (weight_sync.verify). A second failure ends
        the run with its cause."""
        await self.pool.settle()
        try:
            return await asyncio.to_thread(self.trainer.sync_weights, self.version, self._changed_engines())
        except WeightSyncFailed as exc:   # every engine lives; each loads the whole version again
            log.warning("%s: syncing it again", exc)
        except TrainerError as exc:
            if not await self.pool.probe():
                raise
            log.warning("weight sync v%d failed on a dead %s engine: replacing it and syncing again (%s)",
                        self.version, self.name, str(exc).splitlines()[0])
        await self.pool.call_alive("abort_weight_update")   # engines the dead one left waiting for tensors
        await self.pool.settle()
        return await asyncio.to_thread(self.trainer.sync_weights, self.version, self._changed_engines())

    async def push_to(self, engine: Any) -> SyncResult:
        """A new engine: the current weights to it and to the other live engines (one transport group)."""
        live = [self.pool.actors[n] for n in self.pool.alive]
        result = await asyncio.to_thread(self.trainer.sync_weights, self.version, [*live, engine])
        log.info("new %s engine serves policy v%d (%.1f s)", self.name, self.version, result.total_s)
        return result

    def _changed_engines(self) -> Optional[list]:
        """The live engines when they differ from those of the trainer's last sync, else None."""
        live = [self.pool.actors[n] for n in self.pool.alive]
        return None if live == self.trainer.engines else live


class TrainingSystem:
    """What the self-evolution loop drives: the rollout roles, the controller, the stats and the
    trained roles, behind plain async methods (sead_ray.training.loop.LoopSystem). Roles that die are replaced
    here: the profile controller continues from the state its last call returned; an engine of a
    trained role, by its TrainedRole."""

    def __init__(self, roles: RolloutRoles, trainers: dict[str, Any]):
        """`trainers`: one per trained role (core.roles.trained_roles), the agent's first."""
        self.roles = roles
        self.trained = {role: TrainedRole(role, roles.pool(role), trainer, partial(restart_engine, roles, role))
                        for role, trainer in trainers.items()}
        self.last_controller_state: dict = {}  # the controller's state after its last call

    @classmethod
    async def start(cls, cfg: SeadConfig, scenario: Scenario, agent_model: str, run_dir: Path,
                    first_iteration: int = 1, user_model: Optional[str] = None) -> TrainingSystem:
        from actors.trainer import TrainerGroup
        from actors.weights.cluster_checks import shm_free_bytes, trained_weight_bytes, transport_placement_problem
        problem = transport_placement_problem(cfg, [n for n in ray.nodes() if n.get("Alive")],
                                              trained_weight_bytes(cfg, agent_model, user_model), shm_free_bytes)
        if problem:
            raise ConfigError(problem)
        blind = unshared_run_dir_nodes(run_dir)
        if blind:
            raise ConfigError(f"the run directory {run_dir} is not visible on node(s) {', '.join(blind)}: put it on a "
                              "filesystem every node mounts at the same path (cluster.yaml mounts one at /shared)")
        trainers: dict[str, TrainerGroup] = {}

        async def start_trainers(roles: RolloutRoles, agents: list, users: list) -> None:
            models = {"agent": str(resolve_model(agent_model)), "user": roles.user_path}
            engines = {"agent": agents, "user": users}
            for role in trained_roles(cfg):
                trainers[role] = TrainerGroup(cfg, models[role], run_dir, engines=engines[role], role=role)
            # side by side (each on its own workers); both ended before a failure is raised, so that the
            # caller stops a group that has finished starting, never one still starting
            outcomes = await asyncio.gather(*(asyncio.to_thread(t.start) for t in trainers.values()),
                                            return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome

        try:
            roles = await start_rollout_roles(cfg, scenario, agent_model, run_dir, with_controller=True,
                                              trainer_workers=len(trained_roles(cfg)) * cfg.trainer.num_workers,
                                              first_iteration=first_iteration, user_model=user_model,
                                              beside=start_trainers)
        except BaseException:
            for trainer in trainers.values():
                await asyncio.to_thread(trainer.stop)
            raise
        system = cls(roles, trainers)
        try:
            system.last_controller_state = await system._call_controller("state_dict")
        except BaseException:
            await system.stop()
            raise
        return system

    @property
    def trainer(self) -> Any:
        """The agent's trainer group."""
        return self.trained["agent"].trainer

    def endpoints(self) -> RolloutEndpoints:
        return self.roles.endpoints()

    @property
    def user_engines(self) -> int:
        return len(self.roles.users.alive)

    async def rescale(self) -> Optional[dict]:
        change = await rescale_user_pool(self.roles)
        if change and change["added"] and "user" in self.trained:   # the new engines serve the trained simulator
            await self.trained["user"].publish()
        return change

    # -- the profile controller, replaced from its last state if it dies

    async def _call_controller(self, method: str, *args) -> Any:
        timeout = self.roles.cfg.ray.call_timeout_s
        try:
            return await answer_within(getattr(self.roles.controller, method).remote(*args), timeout,
                                       "the profile controller")
        except actor_death_errors() as exc:
            log.warning("the profile controller died (%s): a new one continues from the state of its last call",
                        type(exc).__name__)
        ray.kill(self.roles.controller, no_restart=True)
        self.roles.controller = ProfileControllerActor.options(
            **actor_options(self.roles.plan, "controller", 0)).remote(self.roles.scenario, self.roles.cfg.curriculum,
                                                                     self.roles.cfg.seed)
        await answer_within(self.roles.controller.load_state_dict.remote(self.last_controller_state), timeout,
                            "the replacement profile controller")
        self.roles.restarts["controller"] = self.roles.restarts.get("controller", 0) + 1
        return await answer_within(getattr(self.roles.controller, method).remote(*args), timeout,
                                   "the replacement profile controller")

    async def sample_profiles(self, n: int) -> list[Profile]:
        profiles, self.last_controller_state = await self._call_controller("sample", n)
        return profiles

    async def update_curriculum(self, outcomes: Iterable[tuple[State, Optional[int], bool]]) -> dict:
        snapshot, self.last_controller_state = await self._call_controller("update", list(outcomes))
        return snapshot

    async def controller_state(self) -> dict:
        return self.last_controller_state

    async def restore(self, checkpoint: Path, controller_state: dict, versions: dict[str, int]) -> None:
        """A resumed run: the controller's state, the optimizers', and the versions the engines serve."""
        await self._call_controller("load_state_dict", controller_state)
        self.last_controller_state = controller_state
        for role, trained in self.trained.items():
            trained.version = versions.get(role, 0)
            await trained.pool.call_alive("set_version", trained.version)
            await asyncio.to_thread(trained.trainer.load, ROLES[role].checkpoint(checkpoint))

    # -- the trainers (their calls block: run in a thread, so the rollout's restarts and gauges go on)

    async def grpo_step(self, samples: list[Sample], role: str = "agent", lr: Optional[float] = None,
                        reset_optimizer_after: bool = False) -> StepMetrics:
        """One GRPO update of `role`'s model (at `lr`: the warm start's own rate; None: train.lr; the warm start's
        last step then clears the optimizer's state). Colocated (`placement.colocate`): the engines sleep while the
        trainer steps and wake before the new weights arrive (vLLM cannot load weights into a sleeping engine)."""
        trained = self.trained[role]
        await trained.pool.settle()   # a replacement's weights are pushed before the step changes them
        if not self.roles.cfg.placement.colocate:
            metrics = await asyncio.to_thread(trained.trainer.step, samples, lr, reset_optimizer_after)
        else:
            await asyncio.gather(self.roles.agents.call_alive("sleep"), self.roles.users.call_alive("sleep"))
            try:
                metrics = await asyncio.to_thread(trained.trainer.step, samples, lr, reset_optimizer_after)
            finally:
                await asyncio.gather(self.roles.agents.call_alive("wake_up"), self.roles.users.call_alive("wake_up"))
        trained.version += 1
        return metrics

    async def publish(self, role: str = "agent") -> SyncResult:
        """The version `role`'s last step made, to its engines."""
        return await self.trained[role].publish()

    @property
    def trained_roles(self) -> list[str]:
        return list(self.trained)

    async def set_reference(self, checkpoint: Path, role: str = "agent") -> None:
        """`role`'s KL reference becomes its model in a checkpoint of the run (the rehearsed agent's, iteration 0)."""
        await asyncio.to_thread(self.trained[role].trainer.set_reference, ROLES[role].checkpoint_model(checkpoint))

    def save_weights(self, directory: Path) -> float:
        """Each trained model's checkpoint, in its role's folder of `directory` (core.roles)."""
        return sum(t.trainer.save(ROLES[name].checkpoint(directory)) for name, t in self.trained.items())

    def move_checkpoint(self, staged: Path, directory: Path) -> None:
        """A checkpoint staged on the trainer's node(s) (train.checkpoint_staging_dir), copied into the run directory
        from each node a rank wrote on, then removed from staging there."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from sead_ray.training.checkpoint import copy_staged
        nodes = sorted({ready.node_id for role in self.trained.values() for ready in role.trainer.ready})
        copy = ray.remote(num_cpus=0)(copy_staged)
        ray.get([copy.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                 .remote(str(staged), str(directory)) for node in nodes])

    async def record_iteration(self, iteration: int, phase: str, records: list[dict], extra: dict,
                               curriculum: Optional[dict] = None) -> dict:
        timeout = self.roles.cfg.ray.call_timeout_s
        extra = {**extra, **await self.agent_prefix_cache(timeout)}
        row = await answer_within(self.roles.stats.record_iteration.remote(iteration, phase, records, extra, curriculum),
                                  timeout, "the stats actor")
        await answer_within(self.roles.stats.record_roles.remote(self.roles.health()), timeout, "the stats actor")
        return row

    async def agent_prefix_cache(self, timeout: float) -> dict:
        """The agent engines' prefix-cache hit rate since the last record (their calls' shared system prompt and
        turns, reused by vLLM while generating; the trainer's shared prefix is its counterpart in training): pooled
        over the engines that answer (a dead one is replaced at the next weight sync), `{}` for an agent behind an
        endpoint or with no lookups."""
        answers = await asyncio.gather(*(answer_within(a.engine_load.remote(True), timeout, "an agent engine")
                                         for a in self.roles.agents.actors.values()), return_exceptions=True)
        windows = [w for w in answers if isinstance(w, dict)]
        queries = sum(w["prefix_queries"] for w in windows)
        return {"agent_prefix_cache_hit_rate": sum(w["prefix_hits"] for w in windows) / queries} if queries else {}

    async def stop(self) -> None:
        # the trainers and the rollout roles share nothing once the loop has ended: stopped side by side
        t_stop = time.perf_counter()
        await asyncio.gather(*(asyncio.to_thread(trained.trainer.stop) for trained in self.trained.values()),
                             shutdown_rollout_roles(self.roles))
        log.info("shut down (trainers and engines) in %.0f s", time.perf_counter() - t_stop)
