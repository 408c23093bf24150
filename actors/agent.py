"""AgentActor: the agent's role on an engine actor (actors.engine_actor): replies with their exact
token ids, sampling logprobs and the policy version that produced them."""
from __future__ import annotations

from typing import Optional

import ray

from actors.engine_actor import EngineActor
from actors.routing import EngineDeadError, StickyRouter
from actors.vllm_engine import EngineSpec
from sead_ray.scenario.turn_protocol import AgentTurnOutput


class ContextFullError(RuntimeError):
    """The dialogue no longer fits into the engine's context window."""


@ray.remote
class AgentActor(EngineActor):
    def __init__(self, spec: EngineSpec, version: int = 0):
        super().__init__(spec, version)
        self.tokens_generated = 0

    async def generate(self, prompt_ids: list[int], temperature: float, top_p: float, max_tokens: int,
                       seed: Optional[int] = None, request_id: Optional[str] = None) -> AgentTurnOutput:
        self.check_awake()
        room = self.spec.max_model_len - len(prompt_ids)
        if room < 8:
            raise ContextFullError(f"prompt of {len(prompt_ids)} tokens leaves no room in max_model_len "
                                   f"{self.spec.max_model_len}")
        version = self.version  # the version that serves this request
        try:
            gen = await self.engine.generate(prompt_ids, temperature=temperature, top_p=top_p,
                                             max_tokens=min(max_tokens, room), seed=seed, request_id=request_id)
        except Exception as exc:
            if self.engine.is_dead():
                raise EngineDeadError(f"agent engine is dead ({type(exc).__name__})") from None
            raise
        self.tokens_generated += len(gen.token_ids)
        return AgentTurnOutput(gen.text, gen.token_ids, gen.logprobs, version, gen.finish_reason,
                               prompt_tokens=len(prompt_ids), completion_tokens=len(gen.token_ids))

    def stats(self) -> dict:
        return {"version": self.version, "tokens_generated": self.tokens_generated, "events": list(self.events)}


class AgentPool(StickyRouter):
    """The agent engines, routed per dialogue (sticky, least-loaded). Every engine serves the same
    policy version. A failed turn is not retried elsewhere: its call ends in `error` and the rollout
    plays it again from the start with the same seed (half a call from a dead engine is never kept).
    A dead engine is replaced in its bundle by `restart_fn`, which also gives it the current policy."""
    role = "agent"

    async def generate(self, dialogue_id: str, prompt_ids: list[int], *, messages: Optional[list] = None,
                       **kwargs) -> AgentTurnOutput:
        name = await self.pick_live(dialogue_id)   # (engines take token ids; `messages` are for endpoints)
        return await self.request(name, "generate", prompt_ids, **kwargs)

