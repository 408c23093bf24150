"""The self-evolution loop (SEAD's four phases), over a `LoopSystem` that runs the roles:

    1. sample_profiles     the Profile Controller draws B initial states + behaviors (curriculum)
    2. play_dialogues      one asyncio task per call against the frozen user simulator
    3. learn               per trained role: GRPO advantages -> one update on its trainer -> weights to its engines
    4. analyse_mistakes    completion rate per initial state -> the next sampling weights

Each phase returns a record; `run()` plays iterations and saves checkpoints, in the background: the next
iteration's calls are played while a checkpoint is written, and its GRPO step waits for it. Stopping (Ctrl-C,
SIGTERM), resuming and tearing the system down live in sead_ray.runs.train, beside the loop.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Protocol

from sead_ray.agent.scripted import HONEST, ScriptAgent
from sead_ray.core.config import SeadConfig
from sead_ray.core.jsonl import write_json
from sead_ray.core.roles import ROLES
from sead_ray.curriculum.controller import ProfileController
from sead_ray.play.dialogue import Trajectory
from sead_ray.play.rollout import RolloutEndpoints, RolloutResult, run_dialogues, write_dialogues
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.state import State
from sead_ray.training.checkpoint import CheckpointError, TrainState, save_checkpoint
from sead_ray.training.grpo import compute_advantages
from sead_ray.training.rewards import REWARDS, simulator_reward
from sead_ray.training.trainer_protocol import Sample, StepMetrics, SyncResult, TrainerError
from sead_ray.training.warm_start import WARM_START_SEED, rehearsal_samples

log = logging.getLogger(__name__)


class StopRequested(Exception):
    """Ctrl-C or SIGTERM: end at the next safe point with a checkpoint."""


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


def agent_rewards(trajectories: Sequence[Trajectory], train: Any) -> list[float]:
    """The agent's reward per call (train.reward)."""
    reward = REWARDS.get(train.reward)
    return [reward(t, train) for t in trajectories]


def simulator_rewards(trajectories: Sequence[Trajectory], train: Any) -> list[float]:
    return [simulator_reward(t, train) for t in trajectories]


# What each trained role learns from a batch of calls: its reward per call, and its samples.
LEARNERS: dict[str, tuple[Callable, Callable]] = {"agent": (agent_rewards, samples_from),
                                                  "user": (simulator_rewards, user_samples_from)}


class SelfEvolutionLoop:
    def __init__(self, cfg: SeadConfig, scenario: Scenario, system: LoopSystem, run_dir: Path,
                 start: TrainState, saved: bool, held_out: Sequence[Profile] = ()):
        self.cfg, self.scenario, self.system, self.run_dir = cfg, scenario, system, Path(run_dir)
        self.held_out = list(held_out)  # train.eval_every: the fixed profile set of held-out evaluations
        self.done = start              # the last completed iteration, its controller state and policy version
        self.saved_iteration = start.iteration if saved else 0
        self.last_save_s: Optional[float] = None   # how long the run's last checkpoint took to write
        self.saving: Optional[asyncio.Task] = None  # the checkpoint being written (at most one at a time)
        self.trainer_saving: Optional[asyncio.Future] = None   # done once the trainer's part of it is written
        self.stop_requested = False
        self.weights_ahead = False     # the trainer stepped in an iteration that has not completed yet

    # -- the four phases

    async def sample_profiles(self) -> list[Profile]:
        return await self.system.sample_profiles(self.cfg.train.batch_size)

    async def play_dialogues(self, iteration: int, profiles: list[Profile]) -> Dialogues:
        train, dialogue = self.cfg.train, self.cfg.dialogue
        rollout = await self._unless_stopped(run_dialogues(
            self.system.endpoints(), self.cfg, self.scenario, profiles, iteration=iteration, phase="train",
            sampling=dialogue.agent_train, rollouts_per_profile=train.rollouts_per_profile,
            privileged_user_view=dialogue.privileged_user_view))
        path = self.run_dir / "dialogues" / f"iter_{iteration:04d}.jsonl"
        return Dialogues(rollout, write_dialogues(path, rollout, self.scenario))

    async def learn(self, iteration: int, dialogues: Dialogues) -> dict[str, Learning]:
        """Phase 3 for each trained role (core.roles), the agent first."""
        trajs = dialogues.rollout.played
        if dialogues.rollout.errors:
            log.warning("iter %d: %d call(s) still in error after replays: left out of GRPO and Mistake Analysis",
                        iteration, dialogues.rollout.errors)
        if self.trainer_saving is not None and not self.trainer_saving.done():
            log.info("iter %d: the GRPO step waits for the trainer to write the checkpoint", iteration)
            await self.trainer_saving   # the trainer's weights are the checkpoint's until it wrote them
        self.weights_ahead = True
        return {role: await self.learn_role(role, iteration, trajs) for role in self.system.trained_roles}

    async def learn_role(self, role: str, iteration: int, trajs: Sequence[Trajectory]) -> Learning:
        """One GRPO update of `role`'s model on this iteration's calls, then its new weights to its engines."""
        train = self.cfg.train
        rewards_of, samples_of = LEARNERS[role]
        rewards = rewards_of(trajs, train)
        advantages = compute_advantages(rewards, [t.group for t in trajs], train.advantage_mode)
        samples = samples_of(trajs, advantages, train.max_seq_len)
        no_other_term = train.kl_coef == 0 and train.entropy_coef == 0
        if train.drop_no_signal_calls and no_other_term and any(x.advantage for x in samples):
            kept = [x for x in samples if x.advantage != 0]
            log.info("iter %d %s: %d of %d calls carry no signal (advantage 0): left out of the step", iteration,
                     role, len(samples) - len(kept), len(samples))
            samples = kept
        trained_tokens = sum(sum(x.loss_mask) for x in samples)
        if advantages and all(a == 0 for a in advantages):
            skip = train.skip_no_signal_steps and no_other_term
            log.warning("iter %d: all %s advantages are 0 (no reward differences within the %s baseline, CR %d/%d): %s",
                        iteration, role, train.advantage_mode, sum(t.success for t in trajs), len(trajs),
                        "step skipped, weights stay" if skip else "the policy-gradient term of this step is 0")
            if skip:
                version = self.done.version(role)
                return Learning(rewards, StepMetrics.no_step(trained_tokens),
                                SyncResult(version, 0.0, None, None, 0.0), version)
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
        """SOP rehearsal before iteration 1 (train.warm_start, sead_ray.training.warm_start): the honest script plays
        calls against the run's simulator on profiles drawn apart from every other draw; the agent fine-tunes on those
        it won, one step per train.warm_start_calls calls, and the result is checkpointed as iteration 0 (kept by
        every retention: `RUN@iter_0000`). Done once: a run resumed after it goes on from that checkpoint."""
        train = self.cfg.train
        if train.warm_start == "none" or self.done.iteration > 0 or self.done.version("agent") > 0:
            return
        endpoints = self.system.endpoints()
        script = RolloutEndpoints(ScriptAgent(self.scenario, HONEST), endpoints.users, None, endpoints.engines)
        draws = ProfileController(self.scenario, replace(self.cfg.curriculum, mode="uniform", depth="off"),
                                  self.cfg.seed + WARM_START_SEED)
        version, calls, nll, step_s = self.done.version("agent"), [], [], []
        for step in range(1, train.warm_start_steps + 1):
            rollout = await self._unless_stopped(run_dialogues(
                script, self.cfg, self.scenario, draws.sample(train.warm_start_calls), iteration=0,
                phase=f"warm start {step}/{train.warm_start_steps}", sampling=self.cfg.dialogue.agent_train,
                seed_iteration=-step))
            samples = rehearsal_samples(rollout.played, self.scenario, endpoints.tokenizer, train.max_seq_len,
                                        self.cfg.dialogue.agent_prefill)
            calls += rollout.trajectories
            if not samples:
                log.warning("warm start step %d: the honest script won none of its %d calls: nothing to learn from",
                            step, len(rollout.played))
                continue
            self.weights_ahead = True
            metrics = await self.system.grpo_step(samples, "agent", lr=train.warm_start_lr or None,
                                                  reset_optimizer_after=step == train.warm_start_steps)
            version = (await self.system.publish("agent")).version
            # the samples' "rollout" logprobs are 0, so the trainer's mismatch is the script turns' mean NLL
            nll.append(metrics.logprob_mismatch_mean)
            step_s.append(round(metrics.step_s, 2))
            log.info("warm start step %d/%d: %d script calls won of %d, NLL of their turns %.3f (%d tokens), step %.0f s; "
                     "weights v%d", step, train.warm_start_steps, len(samples), len(rollout.played), nll[-1] or 0.0,
                     metrics.agent_tokens, metrics.step_s, version)
        self.done = TrainState(0, self.done.controller, {**self.done.versions, "agent": version})
        self.weights_ahead = False
        played = RolloutResult(calls, 0.0, 0, endpoints.engines)
        records = write_dialogues(self.run_dir / "dialogues" / "warm_start.jsonl", played, self.scenario)
        await self.system.record_iteration(0, "warm_start", records, {
            "warm_start": train.warm_start, "warm_start_steps": train.warm_start_steps, "policy_version": version,
            "warm_start_nll": nll, "warm_start_step_s": step_s})
        await self.save(force=True)

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
                iteration=iteration, phase=phase, sampling=self.cfg.dialogue.agent_eval, seed_iteration=0))
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
        """`run()`; on a stop request (returns True) or any failure (re-raised) the last completed
        iteration is checkpointed first, so nothing done is lost."""
        try:
            await self.run()
            return False
        except (StopRequested, asyncio.CancelledError):
            await self.save(stopping=True, wait=True)
            return True
        except Exception as failure:   # not KeyboardInterrupt: a second Ctrl-C means leave now
            if self.weights_ahead:   # the weights no longer match the last completed iteration
                await self._saved_or_logged()
                log.error("the failure came after a GRPO step of an unfinished iteration: no checkpoint written; "
                          "resume from the last one (iteration %d)", self.saved_iteration)
                raise
            if isinstance(failure, (TrainerError, CheckpointError)):   # saving needs the trainer that just failed
                await self._saved_or_logged()
                log.error("the trainer or its checkpoint failed: no checkpoint written; resume from the last one "
                          "(iteration %d)", self.saved_iteration)
                raise
            try:
                await self.save(wait=True)
            except Exception as exc:   # e.g. the trainer itself is what failed: report the first error
                log.error("could not checkpoint iteration %d after the failure: %r", self.done.iteration, exc)
            raise

    async def save(self, stopping: bool = False, force: bool = False, wait: bool = False) -> None:
        """Checkpoint the last completed iteration (if not saved yet; `force`: the warm start's iteration 0), in the
        background unless `wait` or train.checkpoint_in_background is off; a save still in flight ends first.
        `stopping`: not when the run's last save took longer than train.stop_save_max_s and a checkpoint exists
        (the stop must end in time)."""
        await self.saved()
        if self.done.iteration <= self.saved_iteration and not force:
            return
        limit = self.cfg.train.stop_save_max_s
        if stopping and self.saved_iteration and self.last_save_s is not None and self.last_save_s > limit:
            log.warning("stopping without a checkpoint of iteration %d: the last save took %.0f s (train.stop_save_max_s "
                        "= %.0f); a resume continues after iteration %d", self.done.iteration, self.last_save_s, limit,
                        self.saved_iteration)
            return
        state, loop, staging = self.done, asyncio.get_running_loop(), self.cfg.train.checkpoint_staging_dir
        trainer_saving = self.trainer_saving = loop.create_future()

        async def write() -> None:
            t0 = time.perf_counter()
            await asyncio.to_thread(save_checkpoint, self.system.save_weights, self.run_dir, state,
                                    self.cfg.train.keep_checkpoints, Path(staging) if staging else None,
                                    self.system.move_checkpoint if staging else None,
                                    lambda: loop.call_soon_threadsafe(trainer_saving.set_result, None))
            self.saved_iteration, self.last_save_s = state.iteration, time.perf_counter() - t0
        self.saving = asyncio.ensure_future(write())
        if wait or not self.cfg.train.checkpoint_in_background:
            await self.saved()

    async def saved(self) -> None:
        """Wait for the checkpoint being written, if one is (its failure is raised here)."""
        if self.saving is None:
            return
        try:
            await asyncio.shield(self.saving)   # a cancelled wait leaves the writer to finish, and to be waited for
        finally:
            if self.saving.done():
                self.saving = None

    async def _saved_or_logged(self) -> None:
        """After a failure: let a checkpoint in flight end (it holds a completed iteration), its own error only logged."""
        try:
            await self.saved()
        except Exception as exc:
            log.error("the checkpoint being written when the run failed did not complete: %r", exc)

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
