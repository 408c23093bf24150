"""What plays the agent's side of a call, chosen by the reference's prefix (models.agent, compare's and talk's
agents): one registry entry per kind. Each says whether the run's agent engines play it (a model: an embedded name,
a Hugging Face path or a run directory, its weights loaded there) and otherwise how it is built; how a reference is
checked before anything starts; and what an evaluation played by it depends on. A new kind is one entry here.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Optional

from sead_ray.core.registry import Registry


@dataclass(frozen=True)
class AgentBackend:
    prefix: str                     # the references it plays ("": any reference no other entry claims)
    on_engine: bool                 # played by the run's agent engines
    check: Callable[[Any, str], None]           # (cfg, ref): raises on a reference that cannot be played
    # (cfg, ref): what its calls depend on, for an evaluation's fingerprint (None: never the same twice)
    identity: Callable[[Any, str], Optional[str]]
    # (cfg, scenario, ref) -> (the agent behind the rollout's endpoint interface, what its start-up says)
    build: Optional[Callable[[Any, Any, str], Awaitable[tuple[Any, dict]]]] = None


AGENT_BACKENDS: Registry[AgentBackend] = Registry("agent", "agent backend")


def agent_backend(ref: str) -> AgentBackend:
    """The backend whose prefix `ref` starts with (the model backend, prefix "", for any other)."""
    claimed = [backend for backend in map(AGENT_BACKENDS.get, AGENT_BACKENDS) if ref.startswith(backend.prefix)]
    return max(claimed, key=lambda backend: len(backend.prefix))


def check_model_refs(cfg: Any, refs: Any) -> None:
    """Every reference can be played (scripts known, endpoints well formed with their key set, models resolved)
    before anything starts."""
    for name in refs:
        agent_backend(name).check(cfg, name)


def _script_check(cfg: Any, ref: str) -> None:
    from sead_ray.agent.scripted import script_class
    script_class(ref)


async def _script_build(cfg: Any, scenario: Any, ref: str) -> tuple[Any, dict]:
    from sead_ray.agent.scripted import ScriptAgent, script_class
    name = script_class(ref)
    return ScriptAgent(scenario, name), {"script": name}


def _endpoint_check(cfg: Any, ref: str) -> None:
    from sead_ray.agent.endpoints import endpoint_key, endpoint_ref
    endpoint_key(cfg, endpoint_ref(ref))


async def _endpoint_build(cfg: Any, scenario: Any, ref: str) -> tuple[Any, dict]:
    from sead_ray.agent.endpoints import EndpointAgent, endpoint_client, endpoint_ref
    agent = EndpointAgent(endpoint_client(cfg, endpoint_ref(ref)), scenario)
    return agent, await agent.start()


def _model_check(cfg: Any, ref: str) -> None:
    from sead_ray.core.models import resolve_model
    resolve_model(ref)


def _model_identity(cfg: Any, ref: str) -> str:
    from sead_ray.core.models import resolve_model
    return str(resolve_model(ref).resolve())


AGENT_BACKENDS.add("script", AgentBackend("script:", False, _script_check, lambda cfg, ref: ref, _script_build))
AGENT_BACKENDS.add("openai", AgentBackend("openai:", False, _endpoint_check, lambda cfg, ref: None, _endpoint_build))
AGENT_BACKENDS.add("model", AgentBackend("", True, _model_check, _model_identity))
