"""The served agent's protocol (`sead-ray serve`), without Ray: what a client may send, what the model
is prompted with, and what comes back.

A client sends only the call so far, OpenAI-style: `messages` alternating `assistant` (the agent's
spoken replies; optionally with the `sead_estimate` the server returned for them) and `user` (what the
callee said), starting with the agent and ending with the callee (or empty: the call just connected).
The server puts the scenario's system prompt and call opening in front, writes the agent's earlier
turns back in its output format, prefills the reply and parses the output: the response's
`message.content` is the spoken reply only; the state estimate comes in `sead_estimate`, and
`sead_format_ok` says whether the output followed the format. A system message from the client is
refused: the scenario's prompt is the server's.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from sead_ray.agent.prompt import agent_messages, parse_agent_output
from sead_ray.scenario.scenario import Scenario

OWNER = "sead-ray"   # `owned_by` of the served model in GET /v1/models: how clients recognise a served agent


class RequestError(ValueError):
    """A request the server refuses (HTTP 400), with what was wrong."""


@dataclass
class ServeLimits:
    max_request_bytes: int = 64 * 1024
    max_messages: int = 64
    max_tokens: int = 256


@dataclass
class AgentRequest:
    """A validated client request."""
    spoken: list[str]                     # the agent's earlier replies
    estimates: list[Optional[dict]]       # their estimates, as returned (None where absent)
    heard: list[str]                      # what the callee said after each
    max_tokens: int
    temperature: float
    top_p: float
    seed: Optional[int]


def _number(body: dict, key: str, default: Any, low: float, high: float, kind: type) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
        raise RequestError(f"{key}: expected a number, got {value!r}")
    if not low <= value <= high:
        raise RequestError(f"{key}: {value} is outside [{low}, {high}]")
    return kind(value)


def parse_request(body: Any, limits: ServeLimits, defaults: dict) -> AgentRequest:
    """Validate a chat-completions body; `defaults` are the agent's decoding (temperature, top_p, max_tokens)."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise RequestError("messages: expected a list of {role, content}")
    if len(messages) > limits.max_messages:
        raise RequestError(f"messages: {len(messages)} messages, at most {limits.max_messages}")
    if body.get("stream"):
        raise RequestError("stream: not supported (the reply is parsed before it is returned)")
    spoken, estimates, heard = [], [], []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role == "system":
            raise RequestError(f"messages[{i}]: no system message: the scenario's prompt is applied by the server")
        expected = "assistant" if i % 2 == 0 else "user"
        if role != expected:
            raise RequestError(f"messages[{i}]: expected role {expected!r} (the agent speaks first, then "
                               f"turns alternate), got {role!r}")
        if not isinstance(content, str):
            raise RequestError(f"messages[{i}].content: expected a string")
        if role == "assistant":
            estimate = message.get("sead_estimate")
            spoken.append(content)
            estimates.append(estimate if isinstance(estimate, dict) else None)
        else:
            heard.append(content)
    if messages and len(messages) % 2 == 1:
        raise RequestError("messages: the last message must be the callee's (role user): the agent answers it")
    return AgentRequest(
        spoken, estimates, heard,
        max_tokens=_number(body, "max_tokens", defaults["max_tokens"], 1, limits.max_tokens, int),
        temperature=_number(body, "temperature", defaults["temperature"], 0.0, 2.0, float),
        top_p=_number(body, "top_p", defaults["top_p"], 0.01, 1.0, float),
        seed=_number(body, "seed", None, 0, 2**31 - 1, int))


def agent_turn_text(reply: str, estimate: Optional[dict]) -> str:
    """An earlier agent turn written back in the agent's output format."""
    return json.dumps({"reply": reply, **({"estimate": estimate} if estimate else {})}, ensure_ascii=False)


def model_messages(scenario: Scenario, request: AgentRequest, prefill: str) -> list[dict]:
    """The agent's chat as in training (system prompt, opening, turns), with the prefilled reply last."""
    raw = [agent_turn_text(r, e) for r, e in zip(request.spoken, request.estimates)]
    return agent_messages(scenario, request.heard, raw) + [{"role": "assistant", "content": prefill}]


def response_body(scenario: Scenario, model: str, prefill: str, completion: str, finish_reason: str,
                  prompt_tokens: int, completion_tokens: int) -> dict:
    """An OpenAI chat completion whose content is the spoken reply; the estimate in `sead_estimate`."""
    parsed = parse_agent_output(prefill + completion, scenario.schema)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": parsed.reply},
                     "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
        "sead_estimate": parsed.estimate, "sead_format_ok": parsed.ok,
    }


def error_body(message: str, kind: str, code: int) -> dict:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "code": code}}
