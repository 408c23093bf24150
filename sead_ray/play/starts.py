"""Starts deeper into a call, counted back from its end (issue 36's reverse curriculum): the scenario's honest
script plays the first turns and the policy takes over `depth` turns before the script's final ask (depth 0: the
policy only has to ask; the paper's cold call has no scripted turn at all).

The script's turns enter the agent's context as its own earlier turns, token-exact and out of the loss
(`run_dialogue(..., scripted=...)`); the reward stays the call's outcome. A start exists only where the script's own
call ended with its ask accepted and had more than `depth` turns before it: its prefix never ends the call (the
rule user's verdicts depend only on the agent's words, so the prefix plays out the same under any seed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sead_ray.agent.scripted import HONEST, ScriptAgent
from sead_ray.play.dialogue import CallSettings, run_dialogue
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.turn_protocol import UserFn


@dataclass(frozen=True)
class ScriptedStart:
    depth: int                 # the script's turns before its final ask that the policy takes over
    turns: tuple[str, ...]     # the script's agent turns played for the policy, raw (the agent's format)


async def honest_start(scenario: Scenario, profile: Profile, user: UserFn, settings: CallSettings, depth: int,
                       seed: int = 0) -> Optional[ScriptedStart]:
    """The start `depth` turns before the honest script's final ask on this profile, or None where there is none
    (the script's call did not end with its ask accepted, or had no more than `depth` turns before it)."""
    if depth < 0:
        raise ValueError(f"a start's depth counts turns back from the final ask: >= 0, got {depth}")
    agent = ScriptAgent(scenario, HONEST)

    async def agent_fn(dialogue_id: str, turn: int, messages: list, prompt_ids: Any) -> Any:
        return await agent.generate(dialogue_id, prompt_ids, messages=messages)
    played = await run_dialogue(f"start-{depth}", profile, scenario, agent_fn, user, settings, seed=seed)
    before_ask = len(played.turns) - 1
    if played.end_reason != "accept" or before_ask - depth < 0:
        return None
    return ScriptedStart(depth, tuple(t.agent_raw for t in played.turns[:before_ask - depth]))
