"""The agent's prompt and its tolerant output parser.

The agent's decoding is never grammar-constrained (that would change the distribution the trainer
differentiates), so its format comes from this prompt and `parse_agent_output` copes with whatever
comes back.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from sead_ray.core.parsing import MAX_CHARS, extract_json_object
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.state import State, StateSchema


@dataclass
class AgentTurnParse:
    reply: str                       # what the caller says aloud (all the user ever hears)
    estimate: Optional[dict]         # the agent's estimate of the user's state, None if absent
    ok: bool                         # the output followed the format
    error: Optional[str] = None


def agent_system_prompt(scenario: Scenario) -> str:
    schema = scenario.schema
    dims = "\n".join(f"- {d.name} (0-{d.max_level}): " + "; ".join(f"{i} = {t}" for i, t in enumerate(d.levels))
                     for d in schema.dimensions)
    estimate = ", ".join(f'"{d.name}": <0-{d.max_level}>' for d in schema.dimensions)
    return (
        f"{scenario.agent_role}\n\nGoal: {scenario.objective}\n\n"
        "Follow these steps:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(scenario.sop, 1)) +
        "\n\nFacts you may use (never invent others):\n" + "\n".join(f"- {f}" for f in scenario.facts) +
        f"\n\nAfter each thing the {scenario.user_title} says, estimate the {scenario.user_title}'s current state:\n"
        + dims + "\n\nAnswer with one JSON object only: your next sentence(s) in \"reply\" (short, as in a "
        f"{scenario.channel}) and your estimate in \"estimate\": " + "{\"reply\": <your words>, \"estimate\": {"
        + estimate + "}}"
    )


def agent_messages(scenario: Scenario, user_turns: Sequence[str], agent_raw_turns: Sequence[str],
                   system_prompt: Optional[str] = None,
                   privileged_states: Optional[Sequence[Optional[State]]] = None) -> list[dict]:
    """Chat messages for the agent's next turn: the opening, then alternating agent outputs (raw, as
    generated) and the user's spoken replies. `privileged_states` (training-time option only) appends
    the simulator's true state to each user message."""
    if len(user_turns) != len(agent_raw_turns):
        raise ValueError("the agent speaks after each user turn: need as many user turns as agent turns")
    messages = [{"role": "system", "content": system_prompt or agent_system_prompt(scenario)},
                {"role": "user", "content": scenario.call_opening}]
    for i, (agent_raw, user) in enumerate(zip(agent_raw_turns, user_turns)):
        messages.append({"role": "assistant", "content": agent_raw})
        messages.append({"role": "user", "content": user_message_for_agent(scenario, user,
                         privileged_states[i] if privileged_states else None)})
    return messages


def user_message_for_agent(scenario: Scenario, spoken: str, privileged_state: Optional[State] = None) -> str:
    if privileged_state is None:
        return spoken
    return f"{spoken}\n[true {scenario.user_title} state: {json.dumps(scenario.schema.to_dict(privileged_state))}]"


_REPLY_RE = re.compile(r'"reply"\s*:\s*"((?:[^"\\]|\\.)*)', re.S)


def _estimate_from(obj: object, schema: StateSchema) -> Optional[dict]:
    if not isinstance(obj, dict):
        return None
    try:
        state = schema.from_mapping(obj, clamp=True)
    except ValueError:
        return None
    return schema.to_dict(state)


def _estimate_by_pattern(text: str, schema: StateSchema) -> Optional[dict]:
    """`"trust": 3`-style pairs anywhere in the text, when the JSON itself is broken."""
    found = {}
    for name in schema.names:
        m = re.search(rf'"?{re.escape(name)}"?\s*[:=]\s*"?(-?\d{{1,6}})(?!\d)', text)
        if not m:
            return None
        found[name] = int(m.group(1))
    return _estimate_from(found, schema)


def agent_turn_text(reply: str, schema: StateSchema, estimate: State) -> str:
    """A turn in the agent's format (what parse_agent_output reads): its words and its estimate of the user's state."""
    return json.dumps({"reply": reply, "estimate": schema.to_dict(estimate)})


def parse_agent_output(text: str, schema: StateSchema) -> AgentTurnParse:
    """Reply and state estimate from the agent's raw output. Never raises.

    JSON object with "reply" and "estimate" -> ok. Otherwise the spoken reply is recovered as well as
    possible (a "reply" field cut short, or the whole text) and `ok` is False.
    """
    raw = (text or "")[:MAX_CHARS].strip()
    obj = extract_json_object(raw)
    if obj is not None and isinstance(obj.get("reply"), str) and obj["reply"].strip():
        estimate = _estimate_from(obj.get("estimate"), schema)
        if estimate is None:  # a flat object with the dimensions at top level is fine too
            estimate = _estimate_from(obj, schema)
        if estimate is None:
            return AgentTurnParse(obj["reply"].strip(), None, False, "no usable 'estimate'")
        return AgentTurnParse(obj["reply"].strip(), estimate, True)
    m = _REPLY_RE.search(raw)
    if m and m.group(1).strip():
        try:
            reply = json.loads('"' + m.group(1) + '"')
        except json.JSONDecodeError:
            reply = m.group(1)
        return AgentTurnParse(reply.strip(), _estimate_by_pattern(raw, schema), False, "JSON object did not parse")
    if not raw:
        return AgentTurnParse("", None, False, "empty output")
    # Not JSON at all: treat the text as speech, minus any stray braces.
    return AgentTurnParse(raw.strip("{} \n"), None, False, "output was not a JSON object")
