"""The agent on Ray Serve: Ray's own LLM serving (`ray.serve.llm`: a vLLM engine per replica, replicas
autoscaled between bounds) behind a thin FastAPI ingress that checks the API key, bounds the request,
applies the scenario server-side and returns the spoken reply with the state estimate apart
(sead_ray/agent/serving.py has the protocol).

Bounds: a body over `max_request_bytes` gets 413; malformed requests 400; a missing or wrong key 401;
beyond `max_ongoing_requests` per ingress replica, requests queue up to `max_queued_requests` and
further ones get 429 from Serve itself.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.llm._internal.common.callbacks.base import CallbackBase  # ray is pinned: this hook's place is fixed

from actors.vllm_engine import chat_completion_request
from sead_ray.agent.serving import OWNER, RequestError, ServeLimits, error_body, model_messages, parse_request, response_body

api = FastAPI(title="sead-ray agent")


@dataclass
class ServeSettings:
    model_id: str = "agent"
    min_replicas: int = 1
    max_replicas: int = 1
    max_ongoing_requests: int = 8        # per replica, ingress and engine
    max_queued_requests: int = 32        # beyond these, 429
    limits: ServeLimits = field(default_factory=ServeLimits)
    decoding: dict = field(default_factory=lambda: {"temperature": 0.0, "top_p": 1.0, "max_tokens": 64})
    prefill: str = '{"reply": "'


def key_digest(key: str) -> str:
    """Only a digest of the key reaches the replicas (actor arguments are visible in Ray's state API)."""
    return hashlib.sha256(key.encode()).hexdigest()


@serve.deployment(ray_actor_options={"num_cpus": 0})
@serve.ingress(api)
class AgentIngress:
    def __init__(self, llm: Any, scenario: Any, key_sha256: str, settings: ServeSettings):
        self.llm, self.scenario, self.key_sha256, self.settings = llm, scenario, key_sha256, settings

    def _refuse(self, request: Request) -> Optional[JSONResponse]:
        sent = request.headers.get("authorization", "")
        token = sent[7:] if sent.lower().startswith("bearer ") else ""
        if not token or not hmac.compare_digest(key_digest(token), self.key_sha256):
            return JSONResponse(error_body("missing or wrong API key (Authorization: Bearer KEY)",
                                           "authentication_error", 401), status_code=401)
        return None

    @api.get("/v1/models")
    async def models(self, request: Request) -> JSONResponse:
        refused = self._refuse(request)
        if refused:
            return refused
        return JSONResponse({"object": "list", "data": [
            {"id": self.settings.model_id, "object": "model", "owned_by": OWNER,
             "sead_scenario": self.scenario.name}]})

    @api.post("/v1/chat/completions")
    async def chat(self, request: Request) -> JSONResponse:
        refused = self._refuse(request)
        if refused:
            return refused
        limits = self.settings.limits
        size = int(request.headers.get("content-length") or 0)
        raw = b"" if size > limits.max_request_bytes else await request.body()
        if max(size, len(raw)) > limits.max_request_bytes:
            return JSONResponse(error_body(f"request of {max(size, len(raw))} bytes; at most "
                                           f"{limits.max_request_bytes}", "invalid_request_error", 413), status_code=413)
        try:
            parsed = parse_request(json.loads(raw or b"null"), limits, self.settings.decoding)
        except (ValueError, RequestError) as exc:
            return JSONResponse(error_body(str(exc), "invalid_request_error", 400), status_code=400)
        vllm_request = chat_completion_request(
            self.settings.model_id, model_messages(self.scenario, parsed, self.settings.prefill),
            max_tokens=parsed.max_tokens, temperature=parsed.temperature, top_p=parsed.top_p, seed=parsed.seed)
        # LLMServer.chat streams; without `stream` in the request its one item is the whole response
        first = await anext(self.llm.options(stream=True).chat.remote(vllm_request), None)
        if first is None or hasattr(first, "error"):
            message = getattr(getattr(first, "error", None), "message", "no response from the engine")
            return JSONResponse(error_body(message, "engine_error", 502), status_code=502)
        choice, usage = first.choices[0], first.usage
        return JSONResponse(response_body(self.scenario, self.settings.model_id, self.settings.prefill,
                                          choice.message.content or "", str(choice.finish_reason),
                                          usage.prompt_tokens, usage.completion_tokens))


class LocalModelFolder(CallbackBase):
    """ray.serve.llm hook: no model download. Before its engine starts, a replica runs a task on each of its
    nodes to fetch the model from cloud storage (a worker process that imports vLLM: ~10 s on CPU); ours
    is a local folder, which every node of the replica already sees (as the run directory)."""

    async def on_before_node_init(self) -> None:
        self.ctx.run_init_node = False


def build_agent_app(model_path: str, scenario: Any, api_key: str, settings: ServeSettings, engine_kwargs: dict,
                    bundles: list[dict], env: dict) -> Any:
    """The Serve application: Ray's LLM deployment (vLLM; one placement bundle per tensor-parallel rank)
    and our ingress in front of it."""
    from ray.serve.config import BackpressureConfig
    from ray.serve.llm import LLMConfig, build_llm_deployment

    scaling = {"min_replicas": settings.min_replicas, "max_replicas": settings.max_replicas,
               "target_ongoing_requests": max(1, settings.max_ongoing_requests // 2)}
    llm = build_llm_deployment(LLMConfig(
        model_loading_config={"model_id": settings.model_id, "model_source": model_path},
        engine_kwargs=engine_kwargs, placement_group_config={"bundles": bundles}, runtime_env={"env_vars": env},
        callback_config={"callback_class": LocalModelFolder},
        deployment_config={"autoscaling_config": scaling, "max_ongoing_requests": settings.max_ongoing_requests}))
    ingress = AgentIngress.options(
        autoscaling_config=scaling, max_ongoing_requests=settings.max_ongoing_requests,
        max_queued_requests=settings.max_queued_requests, backpressure_config=BackpressureConfig(status_code=429))
    return ingress.bind(llm, scenario, key_digest(api_key), settings)
