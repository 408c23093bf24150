"""The user simulators (`user.backend`, the registry USER_BACKENDS), behind one protocol: a simulator
answers one user turn, `respond(UserRequest) -> UserTurnOutput`.

- `vllm` (the paper): an LLM on a vLLM engine of models.user plays the profile (its prompt and parser:
  sead_ray.user.llm_prompt; the engine is actors/user.py's);
- `rule`: the transparent state machine of sead_ray.user.rule.simulator, in process (no engine).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Protocol

from sead_ray.core.registry import Registry
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.turn_protocol import UserRequest, UserTurnOutput


class UserSimulator(Protocol):
    def respond(self, req: UserRequest) -> UserTurnOutput: ...


@dataclass(frozen=True)
class UserBackend:
    on_engine: bool     # plays on a vLLM engine of models.user (trainable with user.train)
    agenda: bool = False   # reports its progress through the call with each turn (turn_protocol.Agenda)
    # in process, without an engine: (scenario, cfg.user) -> the simulator
    build: Optional[Callable[[Scenario, Any], UserSimulator]] = None


def _rule_user(scenario: Scenario, user: Any) -> UserSimulator:
    from sead_ray.user.rule.simulator import RuleUserSimulator
    return RuleUserSimulator(scenario, user.rule.accept_phrase, user.rule.patience, user.rule.ear)


USER_BACKENDS: Registry[UserBackend] = Registry("user.backend", "user simulator")
USER_BACKENDS.add("vllm", UserBackend(on_engine=True))
USER_BACKENDS.add("rule", UserBackend(on_engine=False, agenda=True, build=_rule_user))


def user_on_engine(user: Any) -> bool:
    """Whether cfg.user's simulator plays on engines of models.user."""
    return USER_BACKENDS.get(user.backend).on_engine
