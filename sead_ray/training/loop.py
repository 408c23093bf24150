"""The self-evolution loop (SEAD's four phases), over a `LoopSystem` that runs the roles:

    1. sample_profiles     the Profile Controller draws B initial states + behaviors (curriculum)
    2. play_dialogues      one asyncio task per call against the frozen user simulator
    3. learn               per trained role: GRPO advantages -> one update on its trainer -> weights to its engines
    4. analyse_mistakes    completion rate per initial state -> the next sampling weights

Each phase returns a record; `run()` plays iterations after the SOP rehearsal (sead_ray.training.warm_start) and
has checkpoints written (sead_ray.training.progress: in the background, while the next iteration's calls play;
what a stop or a failure keeps). Stopping (Ctrl-C, SIGTERM), resuming and tearing the system down live in
sead_ray.runs.train, beside the loop.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Protocol

from sead_ray.core.config import SeadConfig
from sead_ray.core.jsonl import write_json
from sead_ray.core.roles import ROLES, Role
from sead_ray.play.dialogue import Trajectory
from sead_ray.play.rollout import RolloutEndpoints, RolloutResult, run_dialogues, write_dialogues
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.state import State
from sead_ray.training.checkpoint import CheckpointError, TrainState, checkpoint_dir
from sead_ray.training.grpo import compute_advantages
from sead_ray.training.progress import ProgressKeeper, StopRequested
from sead_ray.training.rewards import REWARDS, simulator_reward
from sead_ray.training.trainer_protocol import Sample, StepMetrics, SyncResult, rehearses
from sead_ray.training.warm_start import rehearse

log = logging.getLogger(__name__)


class LoopSystem(Protocol):
    """The running roles, as the loop sees them (actors.trained_roles.TrainingSystem on Ray)."""
    user_engines: int

    def endpoints(self) -> RolloutEndpoints: ...
    async def rescale(self) -> Optional[dict]: ...
    async def sample_profiles(self, n: int) -> list[Profile]: ...
    async def update_curriculum(self, outcomes: Iterable[tuple[State, Optional[int], bool]]) -> dict: ...
    async def controller_state(self) -> dict: ...
    @property
    def trained_roles(self) -> list[str]: ...   # "agent", and "user" with user.train
    async def grpo_step(self, samples: list[Sample], role: str = "agent", lr: Optional[float] = None,
                        reset_optimizer_after: bool = False) -> StepMetrics: ...
    async def publish(self, role: str = "agent") -> SyncResult: ...   # the version the role's last step made
    async def set_reference(self, checkpoint: Path, role: str = "agent") -> None: ...   # the KL's, from a checkpoint
    def save_weights(self, directory: Path) -> Any: ...
    def move_checkpoint(self, staged: Path, directory: Path) -> None: ...   # train.checkpoint_staging_dir
    async def record_iteration(self, iteration: int, phase: str, records: list[dict], extra: dict,
                               curriculum: Optional[dict] = None) -> dict: ...


@dataclass
class Dialogues:
    """Phase 2's record."""
    rollout: RolloutResult
    records: list[dict]            # as written to dialogues/iter_NNNN.jsonl


@dataclass
class Learning:
    """Phase 3's record."""
    rewards: list[float]
    step: StepMetrics
    sync: SyncResult
    policy_version: int


def samples_from(trajectories: Sequence[Trajectory], advantages: Sequence[float], max_seq_len: int) -> list[Sample]:
    """The trainer's view of the calls: token ids, loss mask, rollout logprobs, advantage."""
    return [Sample(t.token_ids[:max_seq_len], t.loss_mask[:max_seq_len], t.rollout_logprobs[:max_seq_len], a)
            for t, a in zip(trajectories, advantages) if t.token_ids and sum(t.loss_mask)]


def user_samples_from(trajectories: Sequence[Trajectory], advantages: Sequence[float], max_seq_len: int) -> list[Sample]:
    """The simulator's turns as the trainer needs them (user.train): one sample per kept turn, its prompt
    (not trained) then its generation, with the advantage of the call the turn belongs to."""
    samples = []
    for t, a in zip(trajectories, advantages):
        for turn in t.user_turns:
            ids = (turn.prompt_ids + turn.token_ids)[:max_seq_len]
            mask = ([0] * len(turn.prompt_ids) + [1] * len(turn.token_ids))[:max_seq_len]
            logprobs = ([0.0] * len(turn.prompt_ids) + turn.logprobs)[:max_seq_len]
            if sum(mask):
                samples.append(Sample(ids, mask, logprobs, a))
    return samples


def role_rewards(role: Role, trajectories: Sequence[Trajectory], train: Any) -> list[float]:
    """A trained role's reward per call: train.reward for the agent, the opposite outcome for the simulator."""
    reward = simulator_reward if role.opposes_agent else REWARDS.get(train.reward)
    return [reward(t, train) for t in trajectories]


def role_samples(role: Role, trajectories: Sequence[Trajectory], advantages: Sequence[float],
                 max_seq_len: int) -> list[Sample]:
    """A trained role's samples of a batch of calls: one per call, or one per turn of each (core.roles)."""
    samples_of = user_samples_from if role.trains_per_turn else samples_from
    return samples_of(trajectories, advantages, max_seq_len)


class SelfEvolutionLoop:
    def __init__(self, cfg: SeadConfig, scenario: Scenario, system: LoopSystem, run_dir: Path,
                 start: TrainState, saved: bool, held_out: Sequence[Profile] = ()):
        self.cfg, self.scenario, self.system, self.run_dir = cfg, scenario, system, Path(run_dir)
        self.held_out = list(held_out)  # train.eval_every: the fixed profile set of held-out evaluations
        self.done = start              # the last completed iteration, its controller state and policy version
        self.progress = ProgressKeeper(cfg, system, run_dir, start.iteration if saved else 0)
        self.stop_requested = False
        self.weights_ahead = False     # the trainer stepped in an iteration that has not completed yet

    # -- the four phases

    async def sample_profiles(self) -> list[Profile]:
        return await self.system.sample_profiles(self.cfg.train.batch_size)

    async def play_dialogues(self, iteration: int, profiles: list[Profile]) -> Dialogues:
        train = self.cfg.train
        rollout = await self._unless_stopped(run_dialogues(
            self.system.endpoints(), self.cfg, self.scenario, profiles, iteration=iteration, phase="train",
            training=True, rollouts_per_profile=train.rollouts_per_profile))
        path = self.run_dir / "dialogues" / f"iter_{iteration:04d}.jsonl"
        return Dialogues(rollout, write_dialogues(path, rollout, self.scenario))

    async def learn(self, iteration: int, dialogues: Dialogues) -> dict[str, Learning]:
        """Phase 3 for each trained role (core.roles), the agent first."""
        trajs = dialogues.rollout.played
        if dialogues.rollout.errors:
            log.warning("iter %d: %d call(s) still in error after replays: left out of GRPO and Mistake Analysis",
                        iteration, dialogues.rollout.errors)
        await self.progress.trainer_written(iteration)
        self.weights_ahead = True
        return {role: await self.learn_role(role, iteration, trajs) for role in self.system.trained_roles}

    async def learn_role(self, role: str, iteration: int, trajs: Sequence[Trajectory]) -> Learning:
        """One GRPO update of `role`'s model on this iteration's calls, then its new weights to its engines."""
        train = self.cfg.train
        rewards = role_rewards(ROLES[role], trajs, train)
        advantages = compute_advantages(rewards, [t.group for t in trajs], train.advantage_mode)
        samples = role_samples(ROLES[role], trajs, advantages, train.max_seq_len)
        # a call with advantage 0 carries gradient only from a KL or entropy term (kept, unless asked otherwise)
        signal_only = train.kl_coef == 0 and train.entropy_coef == 0 or train.drop_no_signal_calls_under_kl
        if train.drop_no_signal_calls and signal_only and any(x.advantage for x in samples):
            kept = [x for x in samples if x.advantage != 0]
            log.info("iter %d %s: %d of %d calls carry no signal (advantage 0): left out of the step", iteration,
                     role, len(samples) - len(kept), len(samples))
            samples = kept
        trained_tokens = sum(sum(x.loss_mask) for x in samples)
        skip = train.lr == 0      # the lr = 0 control (benchmarks/self_play_gain.py): a step would move no weight
        if skip:
            log.info("iter %d %s: train.lr = 0: no step (it would move no weight), weights stay", iteration, role)
        elif advantages and all(a == 0 for a in advantages):
            skip = train.skip_no_signal_steps and signal_only
            log.warning("iter %d: all %s advantages are 0 (no reward differences within the %s baseline, CR %d/%d): %s",
                        iteration, role, train.advantage_mode, sum(t.success for t in trajs), len(trajs),
                        "step skipped, weights stay" if skip else "the policy-gradient term of this step is 0")
        if skip:
            version = self.done.version(role)
            return Learning(rewards, StepMetrics.no_step(trained_tokens), SyncResult(version, 0.0, None, None, 0.0),
                            version)
        log.info("iter %d %s GRPO: %d samples, %d tokens (%d trained), on %d ZeRO-%d worker(s)", iteration, role,
                 len(samples), sum(len(x.token_ids) for x in samples), trained_tokens,
                 self.cfg.trainer.num_workers, self.cfg.trainer.zero_stage)
        step = await self.system.grpo_step(samples, role)
        sync = await self.system.publish(role)
        log.info("iter %d %s GRPO step %.0f s (loss %.4f, grad norm %.3g); weights v%d -> %s engines in %.1f s (%s%s)",
                 iteration, role, step.step_s, step.loss, step.grad_norm or 0.0, sync.version, role, sync.total_s,
                 self.cfg.weight_sync.transport, ", digests equal" if sync.verified else "")
        return Learning(rewards, step, sync, sync.version)

    async def warm_start(self) -> None:
        """The SOP rehearsal before iteration 1 (train.warm_start; sead_ray.training.warm_start.rehearse), done once."""
        if not rehearses(self.cfg) or self.done.iteration > 0 or self.done.version("agent") > 0:
            return
        await rehearse(self)
        await self.save(force=True)

    async def anchor_reference(self) -> None:
        """With a KL term after the SOP rehearsal, its reference is the rehearsed agent (iteration 0's checkpoint, kept
        by every retention), on a fresh run as on a resumed one: the base model would pull self-play back from what
        the rehearsal taught."""
        if self.cfg.train.kl_coef == 0 or not rehearses(self.cfg):
            return
        await self.saved()
        rehearsed = checkpoint_dir(self.run_dir, 0)
        if not (rehearsed / "state.json").exists():
            raise CheckpointError(f"{rehearsed}: no checkpoint of the rehearsed agent, the KL's reference (train.kl_coef "
                                  f"= {self.cfg.train.kl_coef:g} with train.warm_start = {self.cfg.train.warm_start})")
        await self.system.set_reference(rehearsed)
        log.info("the KL's reference is the rehearsed agent (%s)", rehearsed)

    async def analyse_mistakes(self, iteration: int, dialogues: Dialogues) -> dict:
        snapshot = await self.system.update_curriculum((t.profile.state, t.profile.start_depth, t.success)
                                                       for t in dialogues.rollout.played)
        write_json(self.run_dir / "curriculum" / f"iter_{iteration:04d}.json", {"iteration": iteration, **snapshot})
        return snapshot

    async def evaluate_held_out(self, iteration: int) -> dict:
        """The current policy, greedily (dialogue.agent_eval), on the run's fixed held-out profiles with the
        same seeds every time: unlike the training calls (temperature, curriculum draws) comparable
        across iterations. Played from each start of train.eval_depths: the cold call is logged as phase `eval`,
        a depth K as `eval_dK` (metrics.jsonl, TensorBoard, report); returns the rows by phase."""
        rows = {}
        for depth in self.cfg.train.eval_depths:
            depth = None if depth == "cold" else depth
            phase, suffix = ("eval", "") if depth is None else (f"eval_d{depth}", f"_d{depth}")
            rollout = await self._unless_stopped(run_dialogues(
                self.system.endpoints(), self.cfg, self.scenario, [replace(p, start_depth=depth) for p in self.held_out],
                iteration=iteration, phase=phase, training=False, seed_iteration=0))
            records = write_dialogues(self.run_dir / "dialogues" / f"eval_{iteration:04d}{suffix}.jsonl", rollout,
                                      self.scenario)
            rows[phase] = row = await self.system.record_iteration(iteration, phase, records, {
                "policy_version": self.done.version("agent"), "rollout_s": rollout.wall_s,
                "error_calls": rollout.errors, "start_depth": "cold" if depth is None else depth})
            log.info("held-out evaluation after iteration %d, %s: CR %.2f over %d calls", iteration,
                     "cold calls" if depth is None else f"started {depth} turn(s) before the script's ask",
                     row["cr"] or 0.0, len(records))
        return rows

    # -- one iteration, the run

    async def iteration(self, iteration: int) -> dict:
        t0 = time.perf_counter()
        await self.system.rescale()   # `user.engines: auto`: follow rollout nodes joining/leaving
        profiles = await self.sample_profiles()
        dialogues = await self.play_dialogues(iteration, profiles)
        learning = await self.learn(iteration, dialogues)       # from here on the iteration completes
        curriculum = await self.analyse_mistakes(iteration, dialogues)
        versions = {**self.done.versions, **{role: learned.policy_version for role, learned in learning.items()}}
        self.done = TrainState(iteration, await self.system.controller_state(), versions)
        self.weights_ahead = False
        return await self._log(iteration, dialogues, learning, curriculum, time.perf_counter() - t0)

    async def run(self) -> None:
        train = self.cfg.train
        held_out = train.eval_every and self.held_out
        await self.warm_start()
        await self.anchor_reference()
        if held_out and self.done.iteration == 0 and not self._evaluated(0):
            await self.evaluate_held_out(0)     # the policy before self-play (warm-started or not): the first point
        for iteration in range(self.done.iteration + 1, train.iterations + 1):
            if self.stop_requested:
                raise StopRequested
            await self.iteration(iteration)
            if held_out and (iteration % train.eval_every == 0 or iteration == train.iterations):
                await self.evaluate_held_out(iteration)
            if train.checkpoint_every and iteration % train.checkpoint_every == 0 or iteration == train.iterations:
                await self.save()
        await self.saved()

    async def run_keeping_progress(self) -> bool:
        """`run()`; on a stop request (returns True) or any failure (re-raised) the last completed iteration is
        checkpointed first, so nothing done is lost (sead_ray.training.progress)."""
        return await self.progress.keeping_progress(self.run, lambda: self.done, lambda: self.weights_ahead)

    async def save(self, force: bool = False) -> None:
        await self.progress.save(self.done, force=force)

    async def saved(self) -> None:
        await self.progress.saved()

    async def _log(self, iteration: int, dialogues: Dialogues, learning: dict[str, Learning], curriculum: dict,
                   seconds: float) -> dict:
        rollout = dialogues.rollout
        extra = {"dialogues_per_s": rollout.dialogues_per_s, "agent_tokens_per_s": rollout.agent_tokens_per_s,
                 "rollout_s": rollout.wall_s, "user_engines": self.system.user_engines, "iteration_s": seconds,
                 "error_calls": rollout.errors, "error_replays": rollout.replays,
                 # how often the simulator's rules corrected it (sead_ray/scenario/guards.py)
                 "user_step_clamps": sum(t.user_step_clamps for t in rollout.trajectories),
                 "user_status_overrides": sum(t.user_status_overrides for t in rollout.trajectories)}
        for role, learned in learning.items():   # the agent's figures unprefixed, the simulator's as user_...
            prefix = ROLES[role].metric_prefix
            extra.update({f"{prefix}reward_mean": sum(learned.rewards) / max(1, len(learned.rewards)),
                          f"{prefix}policy_version": learned.policy_version, f"{prefix}sync_s": learned.sync.total_s,
                          f"{prefix}sync_mb": learned.sync.mb, f"{prefix}sync_verified": learned.sync.verified,
                          **{f"{prefix}train_{k}": v for k, v in learned.step.to_json().items()}})
        row = await self.system.record_iteration(iteration, "train", dialogues.records, extra, curriculum)
        step = learning["agent"].step
        log.info("iteration %d/%d: CR %.2f, reward %.3f, loss %.4f, logprob mismatch %s, %.0f s", iteration,
                 self.cfg.train.iterations, row["cr"] or 0.0, extra["reward_mean"], step.loss,
                 "-" if step.skipped else f"{step.logprob_mismatch_mean:.2e}", seconds)
        return row

    def _evaluated(self, iteration: int) -> bool:
        depth = self.cfg.train.eval_depths[-1]   # the last one played
        suffix = "" if depth == "cold" else f"_d{depth}"
        return (self.run_dir / "dialogues" / f"eval_{iteration:04d}{suffix}.jsonl").exists()

    async def _unless_stopped(self, coro):
        """Run phase 2, cancelling it when a stop was requested (the iteration is then discarded)."""
        task = asyncio.ensure_future(coro)
        while not task.done():
            await asyncio.wait([task], timeout=0.5)
            if self.stop_requested and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                raise StopRequested
        return task.result()
