"""The rewards a trained role learns from (`train.reward`, the registry REWARDS): one number per call.

A reward reads the call's outcome (anything with `success` and `agent_parse_failures`: a play.dialogue
Trajectory, or a call the viewer summarises) and the train settings. `outcome` is the paper's binary reward;
`milestones` adds a potential-based bonus over the rule user's own agenda (issue 36, off by default;
sead_ray.scenario.turn_protocol.agenda_gain). `planted_brevity` is for smoke runs only: a preference planted so that
the first GRPO step must change the weights.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional, Protocol

from sead_ray.core.registry import Registry


class CallOutcome(Protocol):
    @property
    def success(self) -> bool: ...

    @property
    def agent_parse_failures(self) -> int: ...

    @property
    def agenda_gain(self) -> Optional[float]: ...   # turn_protocol.agenda_gain() of its turns (None: no rule user's agenda)

    @property
    def policy_chars(self) -> Optional[int]: ...   # the policy's raw text in the call, in characters (None: not recorded)


Reward = Callable[[CallOutcome, Any], float]   # (call, cfg.train) -> the agent's reward
REWARDS: Registry[Reward] = Registry("train.reward", "reward")
# the rewards that read the simulator's agenda: refused at load with a simulator that reports none (UserBackend.agenda)
READS_AGENDA = frozenset({"milestones"})


@REWARDS.register("outcome")
def outcome_reward(call: CallOutcome, train: Any) -> float:
    """success_reward on success else 0, less format_penalty per agent turn that did not parse."""
    return (train.success_reward if call.success else 0.0) - train.format_penalty * call.agent_parse_failures


def simulator_reward(call: CallOutcome, train: Any) -> float:
    """user.train (the paper's train-URM ablation): the opposite of the agent's outcome (the agent's format
    penalty is not the simulator's doing)."""
    return -train.success_reward * call.success


@REWARDS.register("milestones")
def milestones_reward(call: CallOutcome, train: Any) -> float:
    """`outcome` plus milestone_weight x success_reward x (Phi(end) - Phi(start)) over the rule user's own agenda
    (turn_protocol.agenda_gain, in [0, 1]): potential-based, so the best policy stays the one that wins; the weight is
    below 0.5 (config range), so any win earns more than any failure. Needs the rule user (checked at load)."""
    gain = call.agenda_gain
    if gain is None:
        raise ValueError("train.reward = milestones reads the simulator's agenda, which this call's turns do not "
                         "carry: use a simulator that reports one (user.backend = rule), or train.reward = outcome")
    return outcome_reward(call, train) + train.milestone_weight * train.success_reward * gain


@REWARDS.register("planted_brevity")
def planted_brevity_reward(call: CallOutcome, train: Any) -> float:
    """Smoke runs only (configs/smoke_*.yaml), never to learn service: minus the characters the policy wrote in the
    call / 1000. Sampled calls differ in what they say whatever their outcome (in characters even when every turn
    runs to max_tokens), so a group's advantages are not all 0 and the first GRPO step must change the weights: what
    proves a weight path (benchmarks/smoke_check.py) with an agent that wins nothing yet."""
    chars = call.policy_chars
    if chars is None:
        raise ValueError("train.reward = planted_brevity reads the text the policy wrote, which this call does not "
                         "record")
    return -chars / 1000.0
