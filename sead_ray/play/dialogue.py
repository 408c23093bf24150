"""One episode: the agent opens, the simulator answers, until accept / refuse / hang-up / T_max.

`run_dialogue` is a pure coroutine over two async callables (the agent and the user back-ends), so
sead_ray.play.rollout can run one task per dialogue on real Ray actors while tests drive it with plain
functions. The agent sees only the user's spoken words; the simulator's state never enters the
agent's prompt unless the training-only `privileged_user_view` option is on.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from sead_ray.agent.prompt import agent_messages, parse_agent_output, user_message_for_agent
from sead_ray.scenario.guards import RuledTurn, StatusGuard, enforce_simulator_rules
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.state import State, StateSchema
from sead_ray.scenario.turn_protocol import (
    AgentFn,
    AgentTurnOutput,
    ChatEncoder,
    UserFn,
    UserRequest,
    UserTurnOutput,
    agenda_gain,
    turn_seed,
)


@dataclass(frozen=True)
class CallSettings:
    """How a call is played, the same for every call of a run: built once from the config (`call_settings`)."""
    max_turns: int                         # T_max: agent turns before the call times out
    user_retries: int = 2                  # simulator outputs that do not parse, asked again before the call errs
    max_step: int = 0                      # most levels a state dimension moves per user turn (0 = unbounded)
    status_guards: Optional[Mapping[str, StatusGuard]] = None   # the scenario's, with user.status_guards
    privileged_user_view: bool = False     # w/o the information gap (ablation): the agent sees the user's state
    agent_prefill: str = ""                # the start of every agent turn, written for the model (token agents)


def call_settings(cfg: Any, scenario: Scenario, *, privileged_user_view: bool = False,
                  agent_prefill: str = "") -> CallSettings:
    """The config's call settings (dialogue.*, user.max_step, user.status_guards)."""
    return CallSettings(cfg.dialogue.max_turns, cfg.dialogue.user_retries, cfg.user.max_step,
                        scenario.status_guards if cfg.user.status_guards else None, privileged_user_view,
                        agent_prefill)


@dataclass
class Turn:
    agent: str
    agent_estimate: Optional[dict]
    agent_raw: str
    agent_parse_ok: bool
    policy_version: int
    agent_tokens: int
    user: Optional[str] = None
    user_state: Optional[dict] = None
    user_status: str = "continue"
    user_parse_ok: bool = True
    agent_prompt_tokens: int = 0   # endpoint agents: prompt tokens billed for the turn
    user_heard: list[dict] = field(default_factory=list)   # the rule user: its verdict on this turn and why
    user_agenda: Optional[dict] = None   # the simulator's agenda after this turn (turn_protocol.Agenda), if it keeps one
    scripted: bool = False         # played by the honest script before the policy took over (a deeper start)

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("user_heard", "user_agenda", "scripted") or v}


@dataclass
class Trajectory:
    dialogue_id: str
    profile: Profile
    turns: list[Turn]
    outcome: str
    end_reason: str
    error: Optional[str] = None
    user_parse_failures: int = 0
    user_step_clamps: int = 0          # state dimensions the simulator moved by more than max_step
    user_status_overrides: int = 0     # endings the scenario's status guards turned into `continue`
    # Token-exact training view (agent generation = mask 1); empty when no encoder was used.
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    rollout_logprobs: list[float] = field(default_factory=list)
    agent_seconds: float = 0.0
    user_seconds: float = 0.0
    wall_seconds: float = 0.0
    accel_seconds: float = 0.0   # this dialogue's share of the engines' wall time (cost metric)
    group: int = 0          # GRPO group (rollouts of the same profile share one)
    iteration: int = 0
    replays: int = 0        # times this call was played again after ending in error
    # user.train: each kept simulator turn, token-exact (the simulator's prompt is rebuilt every turn)
    user_turns: list[UserTurnOutput] = field(default_factory=list)

    @property
    def errored(self) -> bool:
        """Ended by the infrastructure or the simulator, not by the agent: never a policy outcome."""
        return self.end_reason == "error"

    @property
    def success(self) -> bool:
        return self.outcome == "success"

    @property
    def policy_turns(self) -> list[Turn]:
        """The turns the policy generated (not those of a scripted start)."""
        return [t for t in self.turns if not t.scripted]

    @property
    def agent_parse_failures(self) -> int:
        return sum(not t.agent_parse_ok for t in self.policy_turns)

    @property
    def agenda_gain(self) -> Optional[float]:
        """The rule user's agenda done while the policy played (turn_protocol.agenda_gain)."""
        return agenda_gain([{"user_agenda": t.user_agenda, "scripted": t.scripted} for t in self.turns])

    @property
    def policy_chars(self) -> int:
        """What the policy wrote in the call (its raw text, in characters)."""
        return sum(len(t.agent_raw) for t in self.policy_turns)

    @property
    def policy_versions(self) -> list[int]:
        return sorted({t.policy_version for t in self.policy_turns})

    def to_json(self, scenario: Scenario) -> dict:
        """The dialogues-file record (format of `sead-ray metrics`)."""
        return {
            "dialogue_id": self.dialogue_id, "iteration": self.iteration, "group": self.group,
            "profile": self.profile.to_json(scenario.schema),
            "turns": [t.to_json() for t in self.turns],
            "outcome": self.outcome, "end_reason": self.end_reason, "error": self.error,
            "n_agent_turns": len(self.turns),
            "policy_version": min(self.policy_versions) if self.policy_versions else None,
            "policy_versions": self.policy_versions,
            "user_policy_version": min(u.policy_version for u in self.user_turns) if self.user_turns else None,
            "agent_tokens": sum(t.agent_tokens for t in self.turns),
            "agent_parse_failures": self.agent_parse_failures, "replays": self.replays,
            "user_parse_failures": self.user_parse_failures, "user_step_clamps": self.user_step_clamps,
            "user_status_overrides": self.user_status_overrides,
            **({"scripted_turns": len(self.turns) - len(self.policy_turns)} if len(self.policy_turns) < len(self.turns)
               else {}),
            "timing": {"agent_s": round(self.agent_seconds, 4), "user_s": round(self.user_seconds, 4),
                       "wall_s": round(self.wall_seconds, 4),
                       "accel_s": round(self.accel_seconds, 4) if self.accel_seconds else None},
        }


def apply_simulator_rules(schema: StateSchema, settings: CallSettings, profile: Profile, turn_index: int,
                          state: State, reply: UserTurnOutput) -> RuledTurn:
    """The simulator's proposed state and status under its rules (guards.py). On the first turn of a
    free-form profile (w/o profile sampling) no state was given, so there is no step to limit."""
    chose_own_start = profile.free_form and turn_index == 0
    return enforce_simulator_rules(schema, dict(settings.status_guards or {}), None if chose_own_start else state,
                                   reply.state, reply.status, settings.max_step)


async def run_dialogue(dialogue_id: str, profile: Profile, scenario: Scenario, agent: AgentFn, user: UserFn,
                       settings: CallSettings, *, seed: int = 0, encoder: Optional[ChatEncoder] = None,
                       scripted: Sequence[str] = ()) -> Trajectory:
    """Play one call to its end. Never raises on model output; back-end failures end the dialogue
    with end_reason 'error' and keep the turns played so far. `scripted`: the first agent turns, as the agent's
    raw output, played for it (a start deeper into the call, sead_ray.play.starts); the policy takes over after."""
    schema = scenario.schema
    max_turns, privileged_user_view = settings.max_turns, settings.privileged_user_view
    started = time.perf_counter()
    turns: list[Turn] = []
    agent_raw: list[str] = []
    agent_spoken: list[str] = []
    user_spoken: list[str] = []
    seen_states: list[Optional[State]] = []
    state = profile.state
    traj = Trajectory(dialogue_id, profile, turns, "failure", "timeout")

    def finish(end_reason: str, error: Optional[str] = None) -> Trajectory:
        traj.end_reason = end_reason
        traj.error = error
        traj.outcome = scenario.outcome_of_status.get(end_reason, "failure")
        traj.wall_seconds = time.perf_counter() - started
        if encoder is not None:
            traj.token_ids, traj.loss_mask = list(encoder.token_ids), list(encoder.loss_mask)
            traj.rollout_logprobs = list(encoder.logprobs)
        return traj

    for turn_index in range(max_turns):
        messages = agent_messages(scenario, user_spoken, agent_raw,
                                  privileged_states=seen_states if privileged_user_view else None)
        if turn_index < len(scripted):
            raw = scripted[turn_index]
            if encoder is not None:
                encoder.add_scripted(raw)
            out = AgentTurnOutput(raw[len(settings.agent_prefill):] if raw.startswith(settings.agent_prefill) else raw,
                                  policy_version=-1)
        else:
            t0 = time.perf_counter()
            try:
                out = await agent(dialogue_id, turn_index, messages, encoder.prompt_ids() if encoder else None)
            except Exception as exc:  # a dead or failing agent engine ends this dialogue, not the run
                traj.agent_seconds += time.perf_counter() - t0
                return finish("error", f"agent failed at turn {turn_index + 1}: {exc!r}")
            traj.agent_seconds += time.perf_counter() - t0
            if encoder is not None:
                encoder.add_generation(list(out.token_ids), list(out.logprobs))
            raw = settings.agent_prefill + out.text   # the turn as the agent's context holds it
        parsed = parse_agent_output(raw, schema)
        agent_raw.append(raw)
        agent_spoken.append(parsed.reply or "...")
        turn = Turn(parsed.reply, parsed.estimate, raw, parsed.ok, out.policy_version,
                    len(out.token_ids) or out.completion_tokens, agent_prompt_tokens=out.prompt_tokens,
                    scripted=turn_index < len(scripted))
        turns.append(turn)

        reply = None
        t0 = time.perf_counter()
        for attempt in range(settings.user_retries + 1):
            request = UserRequest(dialogue_id, turn_index, profile, list(agent_spoken), list(user_spoken),
                                  seed=turn_seed(seed, turn_index, attempt), user_states=list(seen_states))
            try:
                reply = await user(request)
            except Exception as exc:
                traj.user_seconds += time.perf_counter() - t0
                return finish("error", f"user simulator failed at turn {turn_index + 1}: {exc!r}")
            if reply.ok and reply.state is not None:
                break
            traj.user_parse_failures += 1
        traj.user_seconds += time.perf_counter() - t0
        if reply is None or not reply.ok or reply.state is None:
            turn.user_parse_ok = False
            return finish("error", f"simulator output did not parse after {settings.user_retries + 1} tries: "
                                   f"{reply.error if reply else 'no reply'}")
        if reply.token_ids:
            traj.user_turns.append(reply)
        ruled = apply_simulator_rules(schema, settings, profile, turn_index, state, reply)
        traj.user_step_clamps += ruled.clamped_dimensions
        traj.user_status_overrides += ruled.status_override is not None
        state = ruled.state
        turn.user, turn.user_state, turn.user_status = reply.reply, schema.to_dict(state), ruled.status
        turn.user_heard = list(reply.heard)
        turn.user_agenda = reply.agenda.to_json() if reply.agenda is not None else None
        user_spoken.append(reply.reply)
        seen_states.append(state)
        if ruled.status != "continue":
            return finish(ruled.status)
        if encoder is not None and turn_index + 1 < max_turns:
            encoder.add_user(user_message_for_agent(scenario, reply.reply, state if privileged_user_view else None))
    return finish("timeout")
