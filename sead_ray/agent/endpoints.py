"""Agents behind OpenAI-compatible endpoints: `openai:MODEL@URL` (e.g. `openai:gpt-4o@https://api.openai.com/v1`,
`openai:agent@http://127.0.0.1:8000/v1` for a `sead-ray serve` of a trained run).

Two routes, chosen by asking the endpoint for its models once:
- any chat model: it gets exactly the local agent's prompt (the scenario's system prompt, the opening,
  its own earlier outputs as it wrote them) and its output goes through the same parser;
- a served sead-ray agent (`owned_by: sead-ray`): the server applies the scenario itself, so only the call
  is sent (spoken replies, each with the estimate the server returned for it, and the callee's words);
  the spoken reply and the estimate come back apart and are written back here in the agent's format, so
  the dialogue record, the parser and UPA see the same thing as for a local agent.
The API key comes from the environment variable `endpoint.api_key_env` names, never from a file or flag.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Optional

from sead_ray.agent.prompt import parse_agent_output
from sead_ray.agent.serving import OWNER, agent_turn_text
from sead_ray.core.models import ModelError
from sead_ray.scenario.turn_protocol import AgentTurnOutput

PREFIX = "openai:"


class EndpointError(ModelError):
    """The endpoint is unreachable, or refused or failed a request (a call ends in `error`: not a policy outcome)."""


@dataclass(frozen=True)
class EndpointRef:
    model: str
    url: str          # base URL, ending in /v1 (or wherever /chat/completions lives)

    def __str__(self) -> str:
        return f"{PREFIX}{self.model}@{self.url}"


def endpoint_ref(name: str) -> Optional[EndpointRef]:
    """`openai:MODEL@URL` -> EndpointRef; None for any other model reference."""
    if not name.startswith(PREFIX):
        return None
    model, sep, url = name[len(PREFIX):].rpartition("@")
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise ModelError(f"model {name!r}: an endpoint is written openai:MODEL@http(s)://HOST[:PORT]/v1")
    return EndpointRef(model, url.rstrip("/"))


def api_key_from_env(variable: str, whose: str = "the endpoint's API key (the variable endpoint.api_key_env "
                     "names)") -> str:
    key = os.environ.get(variable, "")
    if not key:
        from sead_ray.core.config import ConfigError
        raise ConfigError(f"{whose}: set the environment variable {variable} (keys are never read from files or flags)")
    return key


def endpoint_key(cfg: Any, ref: EndpointRef) -> str:
    """The API key of an endpoint: from the host's own variable (endpoint.api_key_env_by_host), else the default."""
    from urllib.parse import urlparse
    return api_key_from_env(cfg.endpoint.api_key_env_by_host.get(urlparse(ref.url).hostname or "",
                                                                 cfg.endpoint.api_key_env))


def endpoint_client(cfg: Any, ref: EndpointRef) -> EndpointClient:
    """A client with the endpoint's key, and the config's timeout and concurrency."""
    return EndpointClient(ref, endpoint_key(cfg, ref), timeout_s=cfg.endpoint.timeout_s,
                          max_concurrency=cfg.endpoint.max_concurrency)


class EndpointClient:
    """An OpenAI-compatible API: GET /models, POST /chat/completions, with a bound on requests in flight."""

    def __init__(self, ref: EndpointRef, api_key: str, *, timeout_s: float = 120.0, max_concurrency: int = 16):
        import httpx
        self.ref = ref
        self.http = httpx.AsyncClient(base_url=ref.url, timeout=timeout_s, headers={"Authorization": f"Bearer {api_key}"})
        self.slots = asyncio.Semaphore(max_concurrency)

    async def request(self, method: str, path: str, body: Optional[dict] = None) -> dict:
        import httpx
        try:
            async with self.slots:
                response = await self.http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise EndpointError(f"{self.ref}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise EndpointError(f"{self.ref}: HTTP {response.status_code}: {response.text[:300]}")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise EndpointError(f"{self.ref}: {method} {path} did not answer a JSON object: {response.text[:300]}")
        return answer

    async def models(self) -> dict[str, dict]:
        """The endpoint's models by id; refuses an endpoint that does not list the reference's model."""
        listed = await self.request("GET", "/models")
        models = {m.get("id"): m for m in listed.get("data", []) if isinstance(m, dict)}
        if models and self.ref.model not in models:
            raise EndpointError(f"{self.ref}: no model {self.ref.model!r} there (it serves {sorted(models)})")
        return models

    async def chat(self, body: dict) -> tuple[dict, str]:
        """POST /chat/completions: (the first choice, its text)."""
        answer = await self.request("POST", "/chat/completions", {"model": self.ref.model, **body})
        try:
            choice = answer["choices"][0]
            return answer, choice["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"{self.ref}: not a chat completion: {str(answer)[:300]}") from None

    async def close(self) -> None:
        await self.http.aclose()


class EndpointAgent:
    """The agent role of phase 2 (rollout.AgentEndpoint) played by an OpenAI-compatible endpoint."""

    def __init__(self, client: EndpointClient, scenario: Any):
        self.client, self.ref, self.scenario = client, client.ref, scenario
        self.served: Optional[bool] = None   # a sead-ray server (decided by start())

    async def start(self) -> dict:
        """Ask for the endpoint's models: is MODEL there, and is it a served sead-ray agent?"""
        models = await self.client.models()
        self.served = models.get(self.ref.model, {}).get("owned_by") == OWNER
        return {"endpoint": str(self.ref), "served_sead_agent": self.served}

    def _call_so_far(self, messages: list[dict]) -> list[dict]:
        """The served route's request: the call after the opening, earlier turns as spoken + estimate."""
        call = []
        for message in messages[2:]:   # system prompt and opening: the server's
            if message["role"] == "assistant":
                parsed = parse_agent_output(message["content"], self.scenario.schema)
                call.append({"role": "assistant", "content": parsed.reply, "sead_estimate": parsed.estimate})
            else:
                call.append({"role": "user", "content": message["content"]})
        return call

    async def generate(self, dialogue_id: str, prompt_ids: Optional[list[int]] = None, *, messages: list[dict],
                       seed: Optional[int] = None, request_id: str = "", temperature: float = 0.0, top_p: float = 1.0,
                       max_tokens: int = 64) -> AgentTurnOutput:
        body: dict = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens,
                      "messages": self._call_so_far(messages) if self.served else messages}
        if seed is not None:
            body["seed"] = seed
        answer, content = await self.client.chat(body)
        choice, usage = answer["choices"][0], answer.get("usage") or {}
        text = content
        if self.served and answer.get("sead_format_ok", True):   # else the spoken text alone: a format failure
            text = agent_turn_text(content, answer.get("sead_estimate"))
        return AgentTurnOutput(text, finish_reason=str(choice.get("finish_reason")),
                               prompt_tokens=int(usage.get("prompt_tokens") or 0),
                               completion_tokens=int(usage.get("completion_tokens") or 0))

    def release(self, dialogue_id: str) -> None:
        pass

    async def close(self) -> None:
        await self.client.close()
