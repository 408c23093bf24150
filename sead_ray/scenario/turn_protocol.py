"""What crosses between the dialogue loop and the players' back-ends (engines, rule simulators, endpoints,
scripts): each turn's output, the simulator's request, the back-end call shapes, the ends of a call.
Beside sead_ray.training.trainer_protocol (what crosses to the training ranks). It imports nothing above it."""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional, Protocol

from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.state import State

END_REASONS = ("accept", "refuse", "hangup", "timeout", "error")


@dataclass
class AgentTurnOutput:
    """What an agent back-end returns for one turn (token ids exactly as sampled)."""
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy_version: int = 0
    finish_reason: str = "stop"
    prompt_tokens: int = 0          # endpoint agents: the usage the endpoint reported (no token ids)
    completion_tokens: int = 0


CONCERN = "concern: "   # how an agenda's question names a concern ("concern: cost")


def concern_of(question: Optional[str]) -> Optional[str]:
    """The concern an agenda's question asks about (None: another question, or none)."""
    return question[len(CONCERN):] if question and question.startswith(CONCERN) else None


def agenda_share(identified: bool, offered: bool, own_resolved: int, own_concerns: int) -> float:
    """Phi: the share of the agenda done, (identified + offer named + own concerns resolved) / (2 + own concerns)."""
    return (identified + offered + own_resolved) / (2 + own_concerns)


@dataclass(frozen=True)
class Agenda:
    """A simulator's progress through the call as it reports it after an agent turn (the rule user: who calls,
    the offer, its own concerns; a simulator without one reports none). Recorded with each turn (`user_agenda`):
    the milestones reward, the answer rate and the audit read it from there."""
    identified: bool                 # it knows who is calling
    offered: bool                    # it has heard what the call offers
    concerns: tuple[str, ...]        # its own concerns (the profile's), in the order it raises them
    resolved: tuple[str, ...]        # the concerns an answer resolved so far (its own and others)
    asked: Optional[str] = None      # what it had asked when the turn came (CONCERN + name, "identity", ...)
    asking: Optional[str] = None     # what it asks now, after the turn (None: nothing, or the call ended)

    @property
    def potential(self) -> float:
        own = set(self.concerns)
        return agenda_share(self.identified, self.offered, len(own & set(self.resolved)), len(own))

    def to_json(self) -> dict:
        return {"identified": self.identified, "offered": self.offered, "concerns": list(self.concerns),
                "resolved": list(self.resolved), "asked": self.asked, "asking": self.asking}

    @classmethod
    def from_json(cls, obj: Mapping) -> Agenda:
        return cls(bool(obj["identified"]), bool(obj["offered"]), tuple(obj["concerns"]), tuple(obj["resolved"]),
                   obj.get("asked"), obj.get("asking"))


@dataclass
class UserTurnOutput:
    """What a user-simulator back-end returns for one turn."""
    reply: str
    state: Optional[State]
    status: str
    ok: bool
    raw: str = ""
    error: Optional[str] = None
    engine: str = ""
    # a simulator being trained (user.train): its prompt and generation as the engine saw them
    prompt_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy_version: int = 0
    # the rule user: what it heard in the agent's last turn and why (its ear's reasons, sead_ray.user.rule.ears)
    heard: list[dict] = field(default_factory=list)
    verdict: tuple[str, ...] = ()     # the rule user: what it made of the turn (TurnVerdict's flags that hold)
    agenda: Optional[Agenda] = None   # a simulator that keeps one (UserBackend.agenda): its progress after the turn


@dataclass
class UserRequest:
    """Everything a simulator needs to play one turn (crosses process boundaries)."""
    dialogue_id: str
    turn_index: int
    profile: Profile
    agent_replies: list[str]
    user_replies: list[str]
    seed: int
    user_states: list[State] = field(default_factory=list)   # its state after each of user_replies

    @property
    def current_state(self) -> State:
        """The state its next turn starts from: after its last turn, or the profile's at the first."""
        return self.user_states[-1] if self.user_states else self.profile.state


class ChatEncoder(Protocol):
    """Keeps the agent's context as token ids (see tokens.IncrementalChatEncoder)."""
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]

    def prompt_ids(self) -> list[int]: ...
    def add_generation(self, token_ids: list[int], logprobs: list[float]) -> None: ...
    def add_user(self, content: str) -> None: ...


AgentFn = Callable[[str, int, list[dict], Optional[list[int]]], Awaitable[AgentTurnOutput]]
UserFn = Callable[[UserRequest], Awaitable[UserTurnOutput]]


def turn_seed(dialogue_seed: int, turn_index: int, attempt: int = 0) -> int:
    """A distinct sampling seed per dialogue, turn and retry (vLLM seeds are 63-bit at most)."""
    return (dialogue_seed * 1_000_003 + turn_index * 101 + attempt) % (2**31 - 1)


def recorded_agenda(turn: Mapping) -> Optional[Agenda]:
    """A recorded turn's agenda (its `user_agenda`; None: a simulator that keeps none)."""
    agenda = turn.get("user_agenda")
    return Agenda.from_json(agenda) if agenda else None


def agenda_gain(turns: Sequence[Mapping]) -> Optional[float]:
    """Phi(end) - Phi(start) over a call's recorded turns (dicts with `user_agenda`, `scripted`): start = after the
    last scripted turn (0 on a cold call), end = after the last turn. None where the last turn carries no agenda
    (a simulator that keeps none)."""
    def potential(turn: Mapping) -> Optional[float]:
        agenda = recorded_agenda(turn)
        if agenda is not None:
            return agenda.potential
        legacy = (turn.get("user_heard") or [{}])[0].get("agenda")   # records written before the typed agenda
        return agenda_share(legacy["identified"], legacy["offered"], legacy["resolved"], legacy["concerns"]) \
            if legacy else None
    ends = [potential(t) for t in turns]
    if not ends or ends[-1] is None:
        return None
    scripted = [p for t, p in zip(turns, ends) if t.get("scripted")]
    start = scripted[-1] if scripted and scripted[-1] is not None else 0.0
    return ends[-1] - start
