"""Phase 2, playing the calls: one asyncio task per dialogue, each awaiting its own agent and user
turns, so the engines batch whatever is in flight and a short call never waits for a long one.

The engines are reached through two small endpoints (`AgentEndpoint`, `UserEndpoint`); on Ray they
are the agent and user-simulator pools of actors/, in tests they can be plain objects.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Protocol

from sead_ray.agent.prompt import agent_messages
from sead_ray.agent.token_context import IncrementalChatEncoder
from sead_ray.core.config_schema import SeadConfig
from sead_ray.core.jsonl import write_jsonl
from sead_ray.play.dialogue import Trajectory, call_settings, run_dialogue
from sead_ray.play.starts import start_of
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.turn_protocol import AgentTurnOutput, UserRequest, UserTurnOutput, turn_seed

log = logging.getLogger(__name__)


class AgentEndpoint(Protocol):
    """Engines take the token ids of the agent's context; endpoints (sead_ray.agent.endpoints) its chat messages."""
    async def generate(self, dialogue_id: str, prompt_ids: Optional[list[int]], *, messages: list[dict],
                       seed: int | None, request_id: str, temperature: float, top_p: float,
                       max_tokens: int) -> AgentTurnOutput: ...
    def release(self, dialogue_id: str) -> None: ...


class UserEndpoint(Protocol):
    async def respond(self, request: UserRequest) -> UserTurnOutput: ...
    def release(self, dialogue_id: str) -> None: ...


@dataclass
class RolloutEndpoints:
    """What phase 2 plays against."""
    agent: AgentEndpoint
    users: UserEndpoint
    tokenizer: Any                 # the agent's tokenizer: contexts are kept as its token ids (None: an endpoint)
    engines: int                   # engines busy while calls run (their wall time is the calls' cost)


def dialogue_seed(base_seed: int, iteration: int, index: int, rollout: int = 0) -> int:
    return (base_seed * 7_919 + iteration * 104_729 + index * 1_299_709 + rollout * 15_485_863) % (2**31 - 1)


class Progress:
    """A tqdm bar of finished dialogues on a terminal (with turns played and the running CR), plain
    log lines otherwise (every ~10 % of dialogues, and every 30 s while turns are being played)."""

    def __init__(self, total: int, desc: str, rate_label: str = "CR"):
        self.total, self.desc, self.done, self.turns, self.successes = total, desc, 0, 0, 0
        self.rate_label = rate_label
        self.bar = None
        self.t0 = self.last_log = time.perf_counter()
        if sys.stderr.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, unit="dlg", dynamic_ncols=True)
        else:
            log.info("%s: %d to go", desc, total)

    def _postfix(self) -> str:
        turns = f"turns {self.turns}, " if self.turns else ""
        return f"{turns}{self.rate_label} {self.successes / max(1, self.done):.2f}"

    def _log(self) -> None:
        self.last_log = time.perf_counter()
        log.info("%s: %d/%d done, %s (%.0f s)", self.desc, self.done, self.total, self._postfix(),
                 self.last_log - self.t0)

    def turn(self) -> None:
        self.turns += 1
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
        elif time.perf_counter() - self.last_log > 30:
            self._log()

    def update(self, success: bool) -> None:
        self.done += 1
        self.successes += int(success)
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(self._postfix())
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:
            self._log()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class RolloutResult:
    trajectories: list[Trajectory]
    wall_s: float
    agent_tokens: int
    engines: int

    @property
    def played(self) -> list[Trajectory]:
        """The calls the agent's policy decided: GRPO and Mistake Analysis use only these."""
        return [t for t in self.trajectories if not t.errored]

    @property
    def errors(self) -> int:
        return sum(t.errored for t in self.trajectories)

    @property
    def replays(self) -> int:
        return sum(t.replays for t in self.trajectories)

    @property
    def dialogues_per_s(self) -> float:
        return len(self.trajectories) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def agent_tokens_per_s(self) -> float:
        return self.agent_tokens / self.wall_s if self.wall_s > 0 else 0.0


async def run_dialogues(endpoints: RolloutEndpoints, cfg: SeadConfig, scenario: Scenario, profiles: Sequence[Profile],
                        *, iteration: int, phase: str, training: bool, rollouts_per_profile: int = 1,
                        seed_iteration: Optional[int] = None) -> RolloutResult:
    """Every (profile, rollout) as its own asyncio task; returns when all calls ended. `training`: calls to learn
    from, the agent sampled at dialogue.agent_train (seeing the user's state under dialogue.privileged_user_view);
    else at dialogue.agent_eval. Sampling seeds follow the iteration unless `seed_iteration` pins them (a held-out
    set replays the same seeds)."""
    sampling = cfg.dialogue.agent_train if training else cfg.dialogue.agent_eval
    privileged_user_view = training and cfg.dialogue.privileged_user_view
    params = sampling.as_params()
    prefix = agent_messages(scenario, [], [])
    # An endpoint agent has no token ids and no prefill: it gets chat messages and answers whole.
    settings = call_settings(cfg, scenario, privileged_user_view=privileged_user_view,
                             agent_prefill=cfg.dialogue.agent_prefill if endpoints.tokenizer is not None else "")
    progress = Progress(len(profiles) * rollouts_per_profile, f"iter {iteration} {phase} dialogues")
    starts: dict[int, asyncio.Task] = {}   # per profile: where its calls start (one script call for its whole group)

    async def start(index: int, profile: Profile) -> tuple[Optional[int], tuple[str, ...]]:
        did = f"it{iteration:04d}-p{index:04d}-start"
        try:
            return await start_of(scenario, profile, endpoints.users.respond, settings,
                                  seed=dialogue_seed(cfg.seed, iteration if seed_iteration is None else seed_iteration,
                                                     index), dialogue_id=did)
        finally:
            endpoints.users.release(did)

    async def one(index: int, profile: Profile, rollout: int) -> Trajectory:
        """The call, played again (same profile, same seed) while it ends in error."""
        for replay in range(cfg.dialogue.error_replays + 1):
            traj = await play(index, profile, rollout, replay)
            traj.replays = replay
            if not traj.errored:
                break
            log.warning("call %s ended in error (%s)%s", traj.dialogue_id, traj.error,
                        "; playing it again" if replay < cfg.dialogue.error_replays else "; giving up on it")
        progress.update(traj.success)
        return traj

    async def play(index: int, profile: Profile, rollout: int, replay: int) -> Trajectory:
        did = f"it{iteration:04d}-p{index:04d}-r{rollout}" + (f"-replay{replay}" if replay else "")
        seed = dialogue_seed(cfg.seed, iteration if seed_iteration is None else seed_iteration, index, rollout)

        async def agent_fn(dialogue_id: str, turn: int, messages: list, prompt_ids: list) -> AgentTurnOutput:
            progress.turn()
            return await endpoints.agent.generate(
                dialogue_id, prompt_ids, messages=messages,
                seed=turn_seed(seed, turn) if sampling.temperature > 0 else None,
                request_id=f"{dialogue_id}-a{turn}", **params)

        if index not in starts:
            starts[index] = asyncio.ensure_future(start(index, profile))
        try:
            depth, scripted = await starts[index]
        except Exception as exc:   # the user failed during the script's call: this call ends in error (replayed)
            starts.pop(index, None)
            traj = Trajectory(did, profile, [], "failure", "error")
            traj.error = f"user simulator failed while the honest script played the start: {exc!r}"
            traj.group, traj.iteration = index, iteration
            return traj
        try:
            traj = await run_dialogue(did, replace(profile, start_depth=depth), scenario, agent_fn,
                                      endpoints.users.respond, settings, seed=seed, scripted=scripted,
                                      encoder=IncrementalChatEncoder(endpoints.tokenizer, prefix, settings.agent_prefill)
                                      if endpoints.tokenizer is not None else None)
        finally:
            endpoints.agent.release(did)
            endpoints.users.release(did)
        traj.group, traj.iteration = index, iteration
        return traj

    t0 = time.perf_counter()
    try:
        trajectories = await asyncio.gather(*(one(i, p, r) for i, p in enumerate(profiles)
                                              for r in range(rollouts_per_profile)))
    finally:
        progress.close()
    wall = time.perf_counter() - t0
    for t in trajectories:  # each dialogue's share of the engines' wall time (cost metric)
        t.accel_seconds = wall * endpoints.engines / max(1, len(trajectories))
    tokens = sum(x.agent_tokens for t in trajectories for x in t.turns)
    return RolloutResult(list(trajectories), wall, tokens, endpoints.engines)


def write_dialogues(path: Path, result: RolloutResult, scenario: Scenario) -> list[dict]:
    """The dialogues file (one dialogue a line, `sead-ray metrics` format); returns the records."""
    records = [t.to_json(scenario) for t in result.trajectories]
    write_jsonl(path, records)
    return records
