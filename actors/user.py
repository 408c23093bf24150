"""UserActor (the user's role on an engine actor, actors.engine_actor: frozen, or trained with
user.train) and the pool router that spreads dialogues over them.

The back-ends (sead_ray.user.simulators) behind one interface, `respond(UserRequest) -> UserTurnOutput`: one
on an engine (`vllm`: a frozen LLM decoding under the JSON schema of a user turn) or one in the actor's
process (`rule`: the transparent state machine of sead_ray.user.rule.simulator).
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Optional

import ray

from actors.engine_actor import EngineActor
from actors.routing import EngineDeadError, StickyRouter, actor_death_errors
from actors.vllm_engine import EngineSpec
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.turn_protocol import UserRequest, UserTurnOutput
from sead_ray.user.llm_prompt import parse_user_output, user_output_schema, user_prompt_ids
from sead_ray.user.simulators import USER_BACKENDS

log = logging.getLogger(__name__)


@ray.remote
class UserActor(EngineActor):
    def __init__(self, name: str, scenario: Scenario, user: Any, sampling: dict, *,
                 spec: Optional[EngineSpec] = None, reply_max_chars: int = 300, version: int = 0):
        backend = USER_BACKENDS.get(user.backend)
        if backend.on_engine and spec is None:
            raise ValueError(f"the {user.backend} back-end needs an EngineSpec")
        super().__init__(spec if backend.on_engine else None, version)
        self.name = name
        self.trained = user.train   # return the token ids of each turn
        self.scenario = scenario
        self.sampling = sampling
        self.turns = 0
        if backend.on_engine:
            self.schema = user_output_schema(scenario.schema, reply_max_chars)
        else:
            self.simulator = backend.build(scenario, user)

    async def start(self) -> dict:
        if self.engine is not None:
            from transformers import AutoTokenizer
            self.tokenizer = AutoTokenizer.from_pretrained(self.spec.model_path)
        return {"name": self.name, **await super().start()}

    async def respond(self, req: UserRequest) -> UserTurnOutput:
        self.turns += 1
        if self.engine is None:
            out = self.simulator.respond(req)
            out.engine = self.name
            return out
        prompt = user_prompt_ids(self.tokenizer, self.scenario, req,
                                 budget=self.spec.max_model_len - self.sampling["max_tokens"])
        try:
            gen = await self.engine.generate(prompt, json_schema=self.schema, seed=req.seed,
                                             request_id=f"{req.dialogue_id}-u{req.turn_index}-{req.seed}",
                                             logprobs=self.trained, **self.sampling)
        except Exception as exc:
            if self.engine.is_dead():
                raise EngineDeadError(f"{self.name}: engine is dead ({type(exc).__name__})") from None
            raise
        out = parse_user_output(gen.text, self.scenario.schema, req.current_state)
        if gen.finish_reason == "length" and not out.ok:
            out.error = f"cut off at max_tokens ({out.error})"
        out.engine, out.policy_version = self.name, self.version
        if self.trained:
            out.prompt_ids, out.token_ids, out.logprobs = list(prompt), list(gen.token_ids), list(gen.logprobs)
        return out

    def stats(self) -> dict:
        return {"name": self.name, "turns": self.turns, "version": self.version}


class UserPool(StickyRouter):
    """Routes each user turn to the least-loaded live engine and keeps a dialogue on one engine while
    it lives. If an engine dies, the turn is retried on another engine (the dialogue's state lives in
    the driver, so nothing is lost) and, given a `restart_fn`, a replacement starts in the dead
    engine's bundle; with no live engine left, turns wait for it. Losses and restarts are counted."""
    role = "user simulator"

    def __init__(self, actors: dict[str, Any], restart_fn: Optional[Callable[[str], Awaitable[tuple]]] = None,
                 max_restarts: int = 3, request_timeout_s: Optional[float] = None):
        super().__init__(actors, restart_fn, max_restarts, request_timeout_s)
        self.retried_turns = 0

    async def respond(self, req: UserRequest) -> UserTurnOutput:
        while True:
            name = await self.pick_live(req.dialogue_id)
            try:
                return await self.request(name, "respond", req)
            except actor_death_errors():
                self.retried_turns += 1

    def report(self) -> dict:
        return {"engines": len(self.actors), "alive": len(self.alive), "dead": dict(self.dead),
                "retried_turns": self.retried_turns, "restarts": dict(self.restarts)}
