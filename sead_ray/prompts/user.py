"""The user role-play model's prompt, its JSON output schema and its tolerant parser.

The simulator's decoding is constrained to `user_output_schema` (structured outputs) on vLLM, so
its turns parse; the parser still copes with anything (a cut-off reply, another back-end).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ..scenario import USER_STATUSES, Scenario
from ..state import State, StateSchema
from .parsing import extract_json_object

if TYPE_CHECKING:
    from ..dialogue import UserRequest

REPLY_MAX_CHARS = 300


@dataclass
class UserTurnParse:
    reply: str
    state: Optional[State]
    status: str
    ok: bool
    error: Optional[str] = None


def user_output_schema(schema: StateSchema, reply_max_chars: int = REPLY_MAX_CHARS) -> dict:
    """JSON schema of one simulator turn: spoken reply, new state (one integer per dimension), status."""
    props: dict = {"reply": {"type": "string", "minLength": 1, "maxLength": reply_max_chars}}
    for d in schema.dimensions:
        props[d.name] = {"type": "integer", "minimum": 0, "maximum": d.max_level}
    props["status"] = {"type": "string", "enum": list(USER_STATUSES)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def user_system_prompt(scenario: Scenario, behaviors: Sequence[str], initial_state: Optional[State]) -> str:
    schema = scenario.schema
    dims = "\n".join(f"- {d.name} (0-{d.max_level}): " + "; ".join(f"{i} = {t}" for i, t in enumerate(d.levels))
                     for d in schema.dimensions)
    statuses = "\n".join(f"- {s}: {scenario.status_meaning[s]}" for s in USER_STATUSES)
    start = ("Your state when the call starts: " + schema.describe(initial_state) + "."
             if initial_state is not None else "Choose a realistic starting state for yourself.")
    habits = ("\nHow you behave on this call:\n" + "\n".join(f"- {b}" for b in behaviors)) if behaviors else ""
    example = {"reply": "...", **{d.name: d.max_level // 2 for d in schema.dimensions}, "status": "continue"}
    return (
        f"{scenario.user_persona}\n\nYour inner state has these dimensions:\n{dims}\n\n{start}{habits}\n\n"
        "Each turn: say your reply aloud (one or two short sentences, like on a phone), then update your "
        "state by at most one level per dimension unless the caller is rude or convincing, and decide:\n"
        f"{statuses}\n"
        "Agree only when the caller has earned your trust and answered your concerns; it is fine to refuse.\n"
        "Answer with one JSON object only, for example: " + json.dumps(example)
    )


def user_messages(scenario: Scenario, behaviors: Sequence[str], initial_state: Optional[State],
                  current_state: State, agent_replies: Sequence[str], user_replies: Sequence[str]) -> list[dict]:
    """Messages for the simulator's next turn: the transcript so far (agent's spoken words only) and
    its own current state."""
    if len(agent_replies) != len(user_replies) + 1:
        raise ValueError("the simulator answers the caller's latest turn: need one more agent turn than user turns")
    lines = []
    for i, said in enumerate(agent_replies):
        lines.append(f"Caller: {said}")
        if i < len(user_replies):
            lines.append(f"You: {user_replies[i]}")
    prompt = ("Call so far:\n" + "\n".join(lines) +
              f"\n\nYour state now: {json.dumps(scenario.schema.to_dict(current_state))}.\n"
              "Reply to the caller's last words as the owner, as one JSON object.")
    return [{"role": "system", "content": user_system_prompt(scenario, behaviors, initial_state)},
            {"role": "user", "content": prompt}]


def user_prompt_ids(tokenizer: Any, scenario: Scenario, request: UserRequest, budget: int) -> list[int]:
    """The simulator's prompt as token ids, at most `budget` tokens: a long call keeps its latest
    exchanges (the oldest are dropped first, never the caller's last turn)."""
    profile = request.profile
    initial = None if profile.free_form else profile.state
    agent, user = list(request.agent_replies), list(request.user_replies)
    while True:
        messages = user_messages(scenario, profile.behaviors, initial, request.current_state, agent, user)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= budget or len(agent) <= 1:
            return ids
        agent, user = agent[1:], user[1:]


def parse_user_output(text: str, schema: StateSchema, previous_state: State) -> UserTurnParse:
    """Reply, new state and status from the simulator's output. Never raises.

    Missing or out-of-range dimensions keep/clamp the previous level (ok=False if missing); an unknown
    status is an error (ok=False) and reads as `continue`.
    """
    obj = extract_json_object(text or "")
    if obj is None:
        return UserTurnParse("", None, "continue", False, "no JSON object in the simulator's output")
    reply = obj.get("reply")
    if not isinstance(reply, str) or not reply.strip():
        return UserTurnParse("", None, "continue", False, "missing 'reply'")
    errors = []
    merged = dict(schema.to_dict(previous_state))
    source = obj.get("state") if isinstance(obj.get("state"), dict) else obj
    for name in schema.names:
        if name in source:
            merged[name] = source[name]
        else:
            errors.append(f"missing '{name}'")
    try:
        state = schema.from_mapping(merged, clamp=True)
    except ValueError as exc:
        errors.append(str(exc))
        state = previous_state
    status = str(obj.get("status", "")).strip().lower().replace("-", "").replace("_", "")
    status = {"hangup": "hangup", "hang up": "hangup"}.get(status, status)
    if status not in USER_STATUSES:
        errors.append(f"unknown status {obj.get('status')!r}")
        status = "continue"
    return UserTurnParse(reply.strip(), state, status, not errors, "; ".join(errors) or None)
