"""The driver: starts the Ray roles on their placement groups and runs the loop's phases.

Rollouts (phase 2) are one asyncio task per dialogue, each awaiting its own agent and user calls, so
the engines batch whatever is in flight and a short call never waits for a long one.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from .config import SamplingConfig, SeadConfig, dump_config
from .dialogue import AgentTurnOutput, Trajectory, run_dialogue, turn_seed
from .metrics import compute_metrics
from .profiles import Profile
from .prompts.agent import agent_messages
from .scenario import Scenario
from .tokens import IncrementalChatEncoder

log = logging.getLogger(__name__)

# Quiet engines inside actors: their start-up warnings (eager mode, no Triton on CPU, ...) and
# deprecation notices would bury the progress bars. Errors still reach the console.
ACTOR_ENV = {"VLLM_LOGGING_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "1",
             "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning"}


def init_ray(cfg: SeadConfig) -> dict:
    """Connect to `ray.address` / $RAY_ADDRESS, or start a local cluster sized by `ray.num_cpus`."""
    import ray
    if ray.is_initialized():
        return ray.cluster_resources()
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict = {"runtime_env": {"env_vars": ACTOR_ENV}, "log_to_driver": True}
    if address is None:
        kwargs.update(num_cpus=cfg.ray.num_cpus or os.cpu_count() or 2, include_dashboard=cfg.ray.dashboard)
    ray.init(address=address, **kwargs)
    resources = ray.cluster_resources()
    log.info("Ray cluster: %s", {k: v for k, v in resources.items() if not k.startswith("node:")})
    return resources


def dialogue_seed(base_seed: int, iteration: int, index: int, rollout: int = 0) -> int:
    return (base_seed * 7_919 + iteration * 104_729 + index * 1_299_709 + rollout * 15_485_863) % (2**31 - 1)


class Progress:
    """A tqdm bar of finished dialogues on a terminal (with turns played and the running CR), plain
    log lines otherwise (every ~10 % of dialogues, and every 30 s while turns are being played)."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.done, self.turns, self.successes = total, desc, 0, 0, 0
        self.bar = None
        self.t0 = self.last_log = time.perf_counter()
        if sys.stderr.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, unit="dlg", dynamic_ncols=True)
        else:
            log.info("%s: %d to go", desc, total)

    def _postfix(self) -> str:
        return f"turns {self.turns}, CR {self.successes / max(1, self.done):.2f}"

    def turn(self) -> None:
        self.turns += 1
        now = time.perf_counter()
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
        elif now - self.last_log > 30:
            self.last_log = now
            log.info("%s: %d/%d done, %s (%.0f s)", self.desc, self.done, self.total, self._postfix(), now - self.t0)

    def update(self, success: bool) -> None:
        self.done += 1
        self.successes += int(success)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(self._postfix())
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:
            self.last_log = time.perf_counter()
            log.info("%s: %d/%d done, %s (%.0f s)", self.desc, self.done, self.total, self._postfix(),
                     self.last_log - self.t0)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class RolloutRoles:
    """The rollout side of the system, started once per run."""
    cfg: SeadConfig
    scenario: Scenario
    agent: Any
    pool: Any                      # actors.user_sim.UserSimPool
    stats: Any = None
    controller: Any = None
    tokenizer: Any = None
    plan: dict = field(default_factory=dict)
    startup: dict = field(default_factory=dict)
    user_path: str = ""            # the user model's folder ("" for the rule back-end)


def _engine_bind(cfg: SeadConfig, index: int) -> str:
    if cfg.engine.cpu_bind == "nobind":
        return "nobind"
    if cfg.engine.cpu_bind == "auto":
        return "auto"
    return str(index % (os.cpu_count() or 1))


async def start_rollout_roles(cfg: SeadConfig, scenario: Scenario, agent_model: str, run_dir: Optional[Path] = None,
                              *, with_controller: bool = False, with_stats: bool = True) -> RolloutRoles:
    """Placement groups, then the actors: agent engine, user simulator pool, stats, controller."""
    import ray
    from transformers import AutoTokenizer

    from actors.agent_policy import AgentPolicyActor
    from actors.profile_controller import ProfileControllerActor
    from actors.stats import StatsActor
    from actors.user_sim import UserSimPool
    from actors.vllm_engine import engine_spec_from_config
    from placement import actor_options, create_placement_groups, user_engine_count

    from .models import resolve_model

    agent_path = str(resolve_model(agent_model))
    user_path = str(resolve_model(cfg.models.user)) if cfg.user_sim.backend == "vllm" else ""
    n_user = user_engine_count(cfg, ray.cluster_resources())
    counts = {"agent_policy": 1, "user_sim": n_user, "stats": int(with_stats), "controller": int(with_controller)}
    plan = create_placement_groups(cfg, counts)
    log.info("placement: %s", "; ".join(f"{r}: {rp.describe()}" for r, rp in plan.items()))

    agent = AgentPolicyActor.options(name=None, **actor_options(plan, "agent_policy", 0)).remote(
        engine_spec_from_config(cfg, agent_path, cfg.seed, _engine_bind(cfg, 0)))
    roles = RolloutRoles(cfg, scenario, agent, UserSimPool({}), plan=plan, user_path=user_path)
    users = [_launch_user_sim(roles, i) for i in range(n_user)]
    t0 = time.perf_counter()
    log.info("starting %d engine(s): agent %s; user simulator %s x %d", 1 + (n_user if user_path else 0),
             agent_model, cfg.models.user if user_path else "rule", n_user)
    started = await asyncio.gather(agent.start.remote(), *(u.start.remote() for _, u in users))
    log.info("engines ready in %.0f s", time.perf_counter() - t0)
    for index, ((name, actor), info) in enumerate(zip(users, started[1:])):
        roles.pool.add(name, actor, {**info, "placement_index": index})
    roles.startup = {"agent": started[0], "user_sims": started[1:]}
    roles.tokenizer = AutoTokenizer.from_pretrained(agent_path)
    if with_stats:
        roles.stats = StatsActor.options(**actor_options(plan, "stats", 0)).remote(str(run_dir), scenario.schema)
    if with_controller:
        roles.controller = ProfileControllerActor.options(**actor_options(plan, "controller", 0)).remote(cfg)
    return roles


def _launch_user_sim(roles: RolloutRoles, index: int) -> tuple[str, Any]:
    """Create (not yet start) the user simulator actor in bundle `index` of the user_sim role."""
    from actors.user_sim import UserSimActor
    from actors.vllm_engine import engine_spec_from_config
    from placement import actor_options
    cfg = roles.cfg
    name = f"user-sim-{index}"
    spec = (engine_spec_from_config(cfg, roles.user_path, cfg.seed + 1 + index, _engine_bind(cfg, index + 1))
            if roles.user_path else None)
    actor = UserSimActor.options(max_concurrency=1000, **actor_options(roles.plan, "user_sim", index)).remote(
        name, roles.scenario, cfg.user_sim.backend, _sampling_dict(cfg.dialogue.user), spec=spec,
        rule={"accept_phrase": cfg.user_sim.rule.accept_phrase, "patience": cfg.user_sim.rule.patience},
        reply_max_chars=cfg.dialogue.user_reply_max_chars)
    return name, actor


async def rescale_user_pool(roles: RolloutRoles, timeout_s: float = 60.0) -> Optional[dict]:
    """`user_sim.engines: auto`, between iterations: drop engines whose node left the cluster (or that
    died), then start one engine per unit of the rollout resource the pool does not use yet (nodes that
    joined). Returns {"before", "after", "removed", "added"} when the pool changed, else None."""
    import ray

    from placement import add_actor_group, bundle_for, free_resources, remove_actor_group, user_engine_count
    cfg, pool = roles.cfg, roles.pool
    if cfg.user_sim.engines != "auto" or "user_sim" not in roles.plan:
        return None
    rp = roles.plan["user_sim"]
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
    for name in removed:
        await retire(name, graceful=False)
    target = user_engine_count(cfg, ray.cluster_resources())
    while len(pool.actors) > target:   # the rollout resource shrank on a live node: retire the newest
        name = max(pool.actors, key=lambda n: pool.info[n]["placement_index"])
        await retire(name, graceful=True)
        removed.append(name)
    added = []
    while len(pool.actors) < target:
        index = add_actor_group(rp, bundle_for(cfg.placement.user_sim), timeout_s)
        if index is None:
            log.warning("user simulator pool: the cluster offers %d rollout unit(s) but another engine could not be "
                        "placed within %.0f s (free: %s); keeping %d engine(s)", target, timeout_s, free_resources(),
                        len(pool.actors))
            break
        name, actor = _launch_user_sim(roles, index)
        try:
            info = await actor.start.remote()
        except Exception as exc:
            log.warning("user simulator %s failed to start (%s); keeping %d engine(s)", name, exc, len(pool.actors))
            ray.kill(actor, no_restart=True)
            remove_actor_group(rp, index)
            break
        pool.add(name, actor, {**info, "placement_index": index})
        added.append(name)
    if not removed and not added:
        return None
    change = {"before": before, "after": len(pool.actors), "removed": removed, "added": added}
    log.info("user simulator pool: %d -> %d engine(s) (removed %s, added %s)", before, change["after"],
             removed or "none", added or "none")
    return change


async def shutdown_rollout_roles(roles: RolloutRoles) -> None:
    import ray

    from placement import remove_placement_groups
    await roles.pool.shutdown()
    try:
        await roles.agent.shutdown.remote()
    except Exception:
        pass
    if roles.stats is not None:
        try:
            await roles.stats.close.remote()
        except Exception:
            pass
    for handle in [roles.agent, roles.stats, roles.controller, *roles.pool.actors.values()]:
        if handle is not None:
            ray.kill(handle, no_restart=True)
    remove_placement_groups(roles.plan)


def _sampling_dict(s: SamplingConfig) -> dict:
    return {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens}


class TurnBarrier:
    """Lock-step turns for the turn-synchronous baseline (the reference code's schedule): nobody
    passes until every live dialogue has arrived; a finished dialogue leaves."""

    def __init__(self, parties: int):
        self.parties, self.waiting = parties, 0
        self.event = asyncio.Event()

    def _release_if_full(self) -> None:
        if self.waiting and self.waiting >= self.parties:
            self.event.set()
            self.event = asyncio.Event()
            self.waiting = 0

    async def wait(self) -> None:
        event = self.event
        self.waiting += 1
        self._release_if_full()
        if not event.is_set():
            await event.wait()

    def leave(self) -> None:
        self.parties -= 1
        self._release_if_full()


@dataclass
class RolloutResult:
    trajectories: list[Trajectory]
    wall_s: float
    agent_tokens: int
    engines: int

    @property
    def dialogues_per_s(self) -> float:
        return len(self.trajectories) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def agent_tokens_per_s(self) -> float:
        return self.agent_tokens / self.wall_s if self.wall_s > 0 else 0.0


async def run_dialogues(roles: RolloutRoles, profiles: Sequence[Profile], *, iteration: int, phase: str,
                        sampling: SamplingConfig, rollouts_per_profile: int = 1,
                        privileged_user_view: bool = False, scheduling: str = "async") -> RolloutResult:
    """Phase 2: every (profile, rollout) as its own asyncio task; returns when all calls ended.

    `scheduling="turn_sync"` is the reference code's schedule, kept as the benchmark's baseline:
    all live dialogues take their agent turn together, then their user turn together."""
    cfg, scenario = roles.cfg, roles.scenario
    params = _sampling_dict(sampling)
    prefix = agent_messages(scenario, [], [])
    if scheduling not in ("async", "turn_sync"):
        raise ValueError(f"unknown scheduling {scheduling!r}")
    progress = Progress(len(profiles) * rollouts_per_profile, f"iter {iteration} {phase} dialogues")
    n_dialogues = len(profiles) * rollouts_per_profile
    lockstep = scheduling == "turn_sync"
    agent_barrier, user_barrier = TurnBarrier(n_dialogues), TurnBarrier(n_dialogues)

    async def one(index: int, profile: Profile, rollout: int) -> Trajectory:
        did = f"it{iteration:04d}-p{index:04d}-r{rollout}"
        seed = dialogue_seed(cfg.seed, iteration, index, rollout)
        user_turns_seen: set = set()

        async def agent_fn(dialogue_id: str, turn: int, messages: list, prompt_ids: list) -> AgentTurnOutput:
            if lockstep:
                await agent_barrier.wait()
            progress.turn()
            return await roles.agent.generate.remote(prompt_ids, seed=turn_seed(seed, turn) if sampling.temperature > 0
                                                     else None, request_id=f"{dialogue_id}-a{turn}", **params)

        async def user_fn(request):
            if lockstep and request.turn_index not in user_turns_seen:  # retries do not wait again
                user_turns_seen.add(request.turn_index)
                await user_barrier.wait()
            return await roles.pool.respond(request)

        try:
            traj = await run_dialogue(did, profile, scenario, agent_fn, user_fn, max_turns=cfg.dialogue.max_turns,
                                      seed=seed, user_retries=cfg.dialogue.user_retries,
                                      encoder=IncrementalChatEncoder(roles.tokenizer, prefix, cfg.dialogue.agent_prefill),
                                      privileged_user_view=privileged_user_view,
                                      agent_prefill=cfg.dialogue.agent_prefill)
        finally:
            agent_barrier.leave()
            user_barrier.leave()
        roles.pool.release(did)
        traj.group, traj.iteration = index, iteration
        progress.update(traj.success)
        return traj

    t0 = time.perf_counter()
    tasks = [one(i, p, r) for i, p in enumerate(profiles) for r in range(rollouts_per_profile)]
    try:
        trajectories = await asyncio.gather(*tasks)
    finally:
        progress.close()
    wall = time.perf_counter() - t0
    engines = 1 + (len(roles.pool.actors) if cfg.user_sim.backend == "vllm" else 0)
    for t in trajectories:  # each dialogue's share of the engines' wall time (cost metric)
        t.accel_seconds = wall * engines / max(1, len(trajectories))
    tokens = sum(x.agent_tokens for t in trajectories for x in t.turns)
    return RolloutResult(list(trajectories), wall, tokens, engines)


def write_dialogues(path: Path, result: RolloutResult, scenario: Scenario) -> list[dict]:
    """Write the dialogues file (one dialogue a line, `sead-ray metrics` format); returns the records."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [t.to_json(scenario) for t in result.trajectories]
    tmp = path.with_suffix(".part")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.rename(path)
    return records


async def evaluate(cfg: SeadConfig, scenario: Scenario, agent_model: str, profiles: Sequence[Profile],
                   out_dir: Path, profile_source: str) -> dict:
    """Run the agent against the frozen simulator on a fixed profile set; write dialogues + summary."""
    from .metrics import format_table
    out_dir = Path(out_dir).resolve()   # actors may run in other working directories
    out_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out_dir / "config.yaml")
    roles = await start_rollout_roles(cfg, scenario, agent_model, out_dir)
    try:
        result = await run_dialogues(roles, profiles, iteration=0, phase="eval", sampling=cfg.dialogue.agent_eval)
        records = write_dialogues(out_dir / "dialogues.jsonl", result, scenario)
        extra = {"dialogues_per_s": result.dialogues_per_s, "agent_tokens_per_s": result.agent_tokens_per_s,
                 "wall_s": result.wall_s, "pool": roles.pool.report()}
        await roles.stats.record_iteration.remote(0, "eval", records, extra)
    finally:
        await shutdown_rollout_roles(roles)
    m = compute_metrics(records, scenario.schema)
    summary = {**m.headline(), "metrics": m.to_json(), **extra, "agent": agent_model,
               "user_sim": cfg.user_sim.backend if cfg.user_sim.backend == "rule" else cfg.models.user,
               "profiles": profile_source, "decoding": _sampling_dict(cfg.dialogue.agent_eval),
               "user_decoding": _sampling_dict(cfg.dialogue.user), "seed": cfg.seed}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(format_table(m, title=f"evaluation of {agent_model} ({len(records)} dialogues, {profile_source})", extra={
        "dialogues / s": f"{result.dialogues_per_s:.3f}",
        "agent tokens / s": f"{result.agent_tokens_per_s:.1f}",
        "user engines alive": f"{extra['pool']['alive']}/{extra['pool']['engines']} "
                              f"(turns retried: {extra['pool']['retried_turns']})",
        "output": str(out_dir)}))
    return summary


# --------------------------------------------------------------------------- training (the four phases)

@dataclass
class TrainState:
    """What a checkpoint must hold besides the weights to continue exactly."""
    iteration: int                 # last completed iteration
    controller: dict               # ProfileController.state_dict() after that iteration
    policy_version: int


def _samples_from(trajectories: Sequence[Trajectory], advantages: Sequence[float], max_seq_len: int) -> list:
    from actors.trainer import Sample
    out = []
    for t, a in zip(trajectories, advantages):
        if not t.token_ids or sum(t.loss_mask) == 0:
            continue
        out.append(Sample(t.token_ids[:max_seq_len], t.loss_mask[:max_seq_len], t.rollout_logprobs[:max_seq_len], a))
    return out


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.rename(path)


class StopRequested(Exception):
    """Ctrl-C: end at the next safe point with a checkpoint."""


def latest_checkpoint(run_dir: Path) -> Optional[Path]:
    link = run_dir / "checkpoints" / "latest"
    if not link.exists():
        return None
    return link.resolve()


async def train(cfg: SeadConfig, scenario: Scenario, run_dir: Path, *, resume: bool = False) -> dict:
    """The self-evolution loop. Each iteration runs the paper's four phases:

    1. profile sampling       ProfileController.sample(B)
    2. dialogues              one asyncio task per dialogue against the frozen simulator
    3. GRPO                   advantages -> TrainerGroup.step -> weights broadcast to the agent engine
    4. Mistake Analysis       completion rate per initial state -> next sampling weights
    """
    import signal

    from actors.trainer import TrainerGroup
    from sead_ray.grpo import compute_advantages, trajectory_reward

    from .models import resolve_model

    # Absolute: Ray Train runs its workers in a directory of its own, where a relative path would
    # silently put the checkpoints.
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    start_iteration, version, state = 1, 0, None
    agent_model = str(resolve_model(cfg.models.agent))
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if checkpoint is not None:
        state = json.loads((checkpoint / "state.json").read_text())
        start_iteration, version = state["iteration"] + 1, state["policy_version"]
        agent_model = str(checkpoint / "hf")
        _truncate_metrics(run_dir / "metrics.jsonl", state["iteration"])
        log.info("resuming %s after iteration %d (policy version %d) from %s", run_dir, state["iteration"], version,
                 checkpoint)
    else:
        if resume:
            log.info("no checkpoint in %s yet: starting from the beginning", run_dir)
        _truncate_metrics(run_dir / "metrics.jsonl", 0)
    dump_config(cfg, run_dir / "config.yaml")
    if start_iteration > cfg.train.iterations:
        log.info("%s already finished its %d iterations: nothing to do", run_dir, cfg.train.iterations)
        return {"run_dir": str(run_dir), "iterations": cfg.train.iterations, "interrupted": False, "wall_s": 0.0,
                "checkpoint": str(checkpoint), "tensorboard": str(run_dir / "tensorboard"),
                "metrics": str(run_dir / "metrics.jsonl")}

    roles = await start_rollout_roles(cfg, scenario, agent_model, run_dir, with_controller=True)
    controller = roles.controller
    if state is not None:
        await controller.load_state_dict.remote(state["controller"])
    await roles.agent.set_version.remote(version)
    trainer = TrainerGroup(cfg, agent_model, run_dir, agent=roles.agent)
    stop = {"requested": False, "phase": "start"}
    previous_handler = signal.getsignal(signal.SIGINT)

    def on_sigint(signum, frame):
        if stop["requested"]:
            raise KeyboardInterrupt  # second Ctrl-C: leave now
        stop["requested"] = True
        log.warning("Ctrl-C: stopping at the next safe point with a checkpoint (Ctrl-C again to abort)")
    signal.signal(signal.SIGINT, on_sigint)
    summary: dict = {"run_dir": str(run_dir)}
    last_done = start_iteration - 1
    saved_after = last_done if checkpoint is not None else 0
    # Phase 1 of an aborted iteration has already drawn: a Ctrl-C checkpoint saves this instead.
    controller_after_last = await controller.state_dict.remote()
    try:
        trainer.start()
        if checkpoint is not None:
            trainer.load(checkpoint)
        t_run = time.perf_counter()
        for it in range(start_iteration, cfg.train.iterations + 1):
            if stop["requested"]:
                raise StopRequested
            t_it = time.perf_counter()
            await rescale_user_pool(roles)   # `user_sim.engines: auto`: follow rollout nodes joining/leaving
            # Phase 1: profile sampling
            profiles = await controller.sample.remote(cfg.train.batch_size)
            # Phase 2: dialogues
            rollout = await _cancellable(run_dialogues(
                roles, profiles, iteration=it, phase="train", sampling=cfg.dialogue.agent_train,
                rollouts_per_profile=cfg.train.rollouts_per_profile,
                privileged_user_view=cfg.dialogue.privileged_user_view), stop)
            records = write_dialogues(run_dir / "dialogues" / f"iter_{it:04d}.jsonl", rollout, scenario)
            # Phase 3: GRPO (from here on the iteration completes even on Ctrl-C)
            trajs = rollout.trajectories
            rewards = [trajectory_reward(t.success, t.agent_parse_failures, cfg.train.success_reward,
                                         cfg.train.format_penalty) for t in trajs]
            advantages = compute_advantages(rewards, [t.group for t in trajs], cfg.train.advantage_mode)
            if advantages and all(a == 0 for a in advantages):
                log.warning("iter %d: all advantages are 0 (no reward differences within the %s baseline, CR %d/%d): "
                            "the policy-gradient term of this step is 0", it, cfg.train.advantage_mode,
                            sum(t.success for t in trajs), len(trajs))
            samples = _samples_from(trajs, advantages, cfg.train.max_seq_len)
            log.info("iter %d GRPO: %d trajectories, %d tokens (%d trained), on %d ZeRO-%d worker(s)", it, len(samples),
                     sum(len(x.token_ids) for x in samples), sum(sum(x.loss_mask) for x in samples),
                     cfg.trainer.num_workers, cfg.trainer.zero_stage)
            train_metrics = trainer.step(samples)
            version += 1
            sync = trainer.sync_weights(version)
            log.info("iter %d GRPO step %.0f s (loss %.4f, grad norm %.3g); weights v%d -> agent engine in %.1f s (%s)",
                     it, train_metrics["step_s"], train_metrics["loss"], train_metrics["grad_norm"], version,
                     sync.get("total_s") or 0.0, cfg.weight_sync.transport)
            # Phase 4: Mistake Analysis
            snapshot = await controller.update.remote([(t.profile.state, t.success) for t in trajs])
            _write_json(run_dir / "curriculum" / f"iter_{it:04d}.json", {"iteration": it, **snapshot})
            extra = {"dialogues_per_s": rollout.dialogues_per_s, "agent_tokens_per_s": rollout.agent_tokens_per_s,
                     "rollout_s": rollout.wall_s, "reward_mean": sum(rewards) / max(1, len(rewards)),
                     "policy_version": version, "sync_s": sync.get("total_s"), "sync_mb": sync.get("mb"),
                     "user_engines": len(roles.pool.alive),
                     "iteration_s": time.perf_counter() - t_it, **{f"train_{k}": v for k, v in train_metrics.items()}}
            row = await roles.stats.record_iteration.remote(it, "train", records, extra, snapshot)
            last_done, controller_after_last = it, await controller.state_dict.remote()
            log.info("iteration %d/%d: CR %.2f, reward %.3f, loss %.4f, logprob mismatch %.2e, %.0f s",
                     it, cfg.train.iterations, row["cr"] or 0.0, extra["reward_mean"], train_metrics["loss"],
                     train_metrics["logprob_mismatch_mean"], extra["iteration_s"])
            if cfg.train.checkpoint_every and it % cfg.train.checkpoint_every == 0 or it == cfg.train.iterations:
                await _save(trainer, run_dir, TrainState(it, controller_after_last, version))
                saved_after = it
        summary.update(iterations=last_done, wall_s=time.perf_counter() - t_run, interrupted=False)
    except (StopRequested, asyncio.CancelledError):
        summary.update(iterations=last_done, interrupted=True)
        if last_done > saved_after:
            await _save(trainer, run_dir, TrainState(last_done, controller_after_last, version))
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        t_stop = time.perf_counter()
        trainer.stop()
        t_engines = time.perf_counter()
        await shutdown_rollout_roles(roles)
        log.info("shut down: trainer %.0f s, engines %.0f s", t_engines - t_stop, time.perf_counter() - t_engines)
    summary.update(checkpoint=str(latest_checkpoint(run_dir)) if latest_checkpoint(run_dir) else None,
                   tensorboard=str(run_dir / "tensorboard"), metrics=str(run_dir / "metrics.jsonl"))
    return summary


async def _cancellable(coro, stop: dict):
    """Run phase 2, cancelling it when Ctrl-C was pressed (the iteration is then discarded)."""
    task = asyncio.ensure_future(coro)
    while not task.done():
        await asyncio.wait([task], timeout=0.5)
        if stop["requested"] and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            raise StopRequested
    return task.result()


async def _save(trainer: Any, run_dir: Path, state: TrainState) -> Path:
    directory = run_dir / "checkpoints" / f"iter_{state.iteration:04d}"
    t0 = time.perf_counter()
    trainer.save(directory)
    _write_json(directory / "state.json", {"iteration": state.iteration, "controller": state.controller,
                                           "policy_version": state.policy_version})
    link = run_dir / "checkpoints" / "latest"
    tmp = run_dir / "checkpoints" / ".latest.tmp"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(directory.name)
    os.replace(tmp, link)
    log.info("checkpoint after iteration %d: %s (%.0f s)", state.iteration, directory, time.perf_counter() - t0)
    return directory


def _truncate_metrics(path: Path, last_iteration: int) -> None:
    """Drop metric rows of iterations after the checkpoint (they are redone on resume)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line).get("iteration", 0) <= last_iteration]
    path.write_text("".join(line + "\n" for line in keep))
