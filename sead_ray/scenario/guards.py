"""The simulator's rules, enforced on whatever the simulator (LLM or rule) proposes, after parsing:

- its state moves at most `max_step` levels per dimension per turn (the paper's reference prompt asks
  for one level; a small model does not honour it);
- its status must agree with its state: a scenario's `user.status_guards` say at or above which levels
  `accept` may end a call, at or below which `hangup`/`refuse` may; a status that contradicts the
  state becomes `continue`. The simulator still decides every ending; a scenario without guards leaves
  it fully in charge (the paper's pure setting).
Every correction is counted, so a run reports how often the rules overrode the model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from sead_ray.scenario.state import State, StateSchema


@dataclass(frozen=True)
class StatusGuard:
    """A status is allowed only when every listed dimension is >= its `at_least` and <= its `at_most` level."""
    at_least: dict[str, int] = field(default_factory=dict)
    at_most: dict[str, int] = field(default_factory=dict)

    def allows(self, schema: StateSchema, state: State) -> bool:
        levels = schema.to_dict(state)
        return (all(levels[d] >= v for d, v in self.at_least.items())
                and all(levels[d] <= v for d, v in self.at_most.items()))

    def describe(self) -> str:
        parts = [f"{d} >= {v}" for d, v in self.at_least.items()] + [f"{d} <= {v}" for d, v in self.at_most.items()]
        return " and ".join(parts)


@dataclass
class RuledTurn:
    state: State
    status: str
    clamped_dimensions: int            # dimensions the model moved by more than max_step
    status_override: Optional[str]     # e.g. "accept -> continue", None when the model's status stood


def enforce_simulator_rules(schema: StateSchema, guards: dict[str, StatusGuard], previous: Optional[State],
                            proposed: State, status: str, max_step: int) -> RuledTurn:
    """`previous` None: the simulator chose its first state itself (a free-form profile), no step limit."""
    state, clamped = list(proposed), 0
    if max_step > 0 and previous is not None:
        for i, (before, after) in enumerate(zip(previous, proposed)):
            if abs(after - before) > max_step:
                state[i] = before + max_step * (1 if after > before else -1)
                clamped += 1
    final = tuple(state)
    guard = guards.get(status)
    if guard is not None and not guard.allows(schema, final):
        return RuledTurn(final, "continue", clamped, f"{status} -> continue")
    return RuledTurn(final, status, clamped, None)
