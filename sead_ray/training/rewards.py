"""The rewards a trained role learns from (`train.reward`, the registry REWARDS): one number per call.

A reward reads the call's outcome (anything with `success` and `agent_parse_failures`: a play.dialogue
Trajectory, or a call the viewer summarises) and the train settings. `outcome` is the paper's binary reward.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sead_ray.core.registry import Registry


class CallOutcome(Protocol):
    @property
    def success(self) -> bool: ...

    @property
    def agent_parse_failures(self) -> int: ...


Reward = Callable[[CallOutcome, Any], float]   # (call, cfg.train) -> the agent's reward
REWARDS: Registry[Reward] = Registry("train.reward", "reward")


@REWARDS.register("outcome")
def outcome_reward(call: CallOutcome, train: Any) -> float:
    """success_reward on success else 0, less format_penalty per agent turn that did not parse."""
    return (train.success_reward if call.success else 0.0) - train.format_penalty * call.agent_parse_failures


def simulator_reward(call: CallOutcome, train: Any) -> float:
    """user.train (the paper's train-URM ablation): the opposite of the agent's outcome (the agent's format
    penalty is not the simulator's doing)."""
    return -train.success_reward * call.success
