"""Starts deeper into a call, counted back from its end (issue 36's reverse curriculum): the scenario's honest
script plays the first turns and the policy takes over `depth` turns before the script's final ask (depth 0: the
policy only has to ask; the paper's cold call has no scripted turn at all).

The script's turns enter the agent's context as its own earlier turns, token-exact and out of the loss
(`run_dialogue(..., scripted=...)`); the reward stays the call's outcome. A start exists only where the script's own
call ended with its ask accepted: its prefix never ends the call (the rule user's verdicts depend only on the agent's
words, so the prefix plays out the same under any seed). Where the script had fewer turns before its ask than the
depth drawn, the policy takes over from the script's first turn; where the script's own call failed, there is no
start near its end: both are played as the cold call, and recorded as such (`Profile.start_depth` None).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from sead_ray.agent.scripted import HONEST, ScriptAgent
from sead_ray.play.dialogue import CallSettings, run_dialogue
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.turn_protocol import UserFn

COLD = None   # Profile.start_depth of the paper's cold call


@dataclass(frozen=True)
class ScriptedStart:
    depth: int                 # the script's turns before its final ask that the policy takes over
    turns: tuple[str, ...]     # the script's agent turns played for the policy, raw (the agent's format)


async def honest_start(scenario: Scenario, profile: Profile, user: UserFn, settings: CallSettings, depth: int,
                       seed: int = 0, dialogue_id: str = "start") -> Optional[ScriptedStart]:
    """The start `depth` turns before the honest script's final ask on this profile, or None where there is none
    (the script's call did not end with its ask accepted, or had no more than `depth` turns before it).
    `dialogue_id`: the script's call's, for user endpoints that keep state per call (the caller releases it)."""
    if depth < 0:
        raise ValueError(f"a start's depth counts turns back from the final ask: >= 0, got {depth}")
    agent = ScriptAgent(scenario, HONEST)

    async def agent_fn(dialogue_id: str, turn: int, messages: list, prompt_ids: Any) -> Any:
        return await agent.generate(dialogue_id, prompt_ids, messages=messages)
    # the script writes whole turns in the agent's format: no prefill before them
    played = await run_dialogue(dialogue_id, profile, scenario, agent_fn, user, replace(settings, agent_prefill=""),
                                seed=seed)
    before_ask = len(played.turns) - 1
    if played.end_reason != "accept" or before_ask - depth < 0:
        return None
    return ScriptedStart(depth, tuple(t.agent_raw for t in played.turns[:before_ask - depth]))


async def start_of(scenario: Scenario, profile: Profile, user: UserFn, settings: CallSettings, seed: int = 0,
                   dialogue_id: str = "start") -> tuple[Optional[int], tuple[str, ...]]:
    """Where the call on `profile` starts: (the depth it is played from, the script's turns before it). A drawn depth
    with no start (see the module's doc) falls back to the cold call: (COLD, ())."""
    if profile.start_depth is COLD:
        return COLD, ()
    start = await honest_start(scenario, profile, user, settings, profile.start_depth, seed, dialogue_id)
    return (start.depth, start.turns) if start is not None and start.turns else (COLD, ())
