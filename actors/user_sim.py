"""UserSimActor (the frozen user role-play model) and the pool router that spreads dialogues over them.

Back-ends behind one interface, `respond(UserRequest) -> UserTurnOutput`:
- `vllm`: a frozen LLM on a vLLM AsyncLLM engine, decoding under the JSON schema of a user turn;
- `rule`: the transparent state machine of sead_ray.rule_user (no engine).
"""
from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Optional

import ray

from actors.routing import StickyRouter
from actors.vllm_engine import EngineSpec, VLLMEngine
from sead_ray.dialogue import UserRequest, UserTurnOutput
from sead_ray.prompts.user import parse_user_output, user_output_schema, user_prompt_ids
from sead_ray.rule_user import RuleUserSimulator
from sead_ray.scenario import Scenario

log = logging.getLogger(__name__)


class SimulatorEngineDead(RuntimeError):
    """The actor is alive but its engine is not (the pool treats it like a dead actor)."""


@ray.remote
class UserSimActor:
    def __init__(self, name: str, scenario: Scenario, backend: str, sampling: dict, *,
                 spec: Optional[EngineSpec] = None, rule: Optional[dict] = None, reply_max_chars: int = 300):
        self.name = name
        self.scenario = scenario
        self.backend = backend
        self.sampling = sampling
        self.turns = 0
        if backend == "rule":
            self.rule = RuleUserSimulator(scenario, **(rule or {}))
            self.engine = None
        else:
            if spec is None:
                raise ValueError("the vllm back-end needs an EngineSpec")
            self.spec = spec
            self.engine = VLLMEngine(spec)
            self.schema = user_output_schema(scenario.schema, reply_max_chars)

    async def start(self) -> dict:
        seconds = 0.0
        if self.engine is not None:
            from transformers import AutoTokenizer
            self.tokenizer = AutoTokenizer.from_pretrained(self.spec.model_path)
            seconds = await self.engine.start()
        return {"name": self.name, "startup_s": seconds, "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id()}

    async def respond(self, req: UserRequest) -> UserTurnOutput:
        self.turns += 1
        if self.engine is None:
            out = self.rule.respond(req)
            out.engine = self.name
            return out
        prompt = user_prompt_ids(self.tokenizer, self.scenario, req,
                                 budget=self.spec.max_model_len - self.sampling["max_tokens"])
        try:
            gen = await self.engine.generate(prompt, json_schema=self.schema, seed=req.seed,
                                             request_id=f"{req.dialogue_id}-u{req.turn_index}-{req.seed}",
                                             **self.sampling)
        except Exception as exc:
            if self.engine.is_dead():
                raise SimulatorEngineDead(f"{self.name}: engine is dead ({type(exc).__name__})") from None
            raise
        parsed = parse_user_output(gen.text, self.scenario.schema, req.current_state)
        error = parsed.error
        if gen.finish_reason == "length" and not parsed.ok:
            error = f"cut off at max_tokens ({error})"
        return UserTurnOutput(parsed.reply, parsed.state, parsed.status, parsed.ok, raw=gen.text, error=error,
                              engine=self.name)

    async def sleep(self) -> None:
        if self.engine is not None:
            await self.engine.sleep()

    async def wake_up(self) -> None:
        if self.engine is not None:
            await self.engine.wake_up()

    async def reset_prefix_cache(self) -> None:
        """Forget cached prompt prefixes (benchmarks compare schedules from a cold cache)."""
        if self.engine is not None:
            await self.engine.reset_prefix_cache()

    def stats(self) -> dict:
        return {"name": self.name, "turns": self.turns}

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()


class UserSimPool(StickyRouter):
    """Routes each user turn to the least-loaded live engine and keeps a dialogue on one engine while
    it lives. If an engine dies, the turn is retried on another engine (the dialogue's state lives in
    the driver, so nothing is lost) and, given a `restart` function, a replacement starts in the dead
    engine's bundle; with no live engine left, turns wait for it. Losses and restarts are counted."""
    role = "user simulator"

    def __init__(self, actors: dict[str, Any], restart: Optional[Callable[[str], Awaitable[tuple]]] = None,
                 max_restarts: int = 3):
        super().__init__(actors)
        self.retried_turns = 0
        self.restart_fn, self.max_restarts = restart, max_restarts
        self.restarts: dict[str, int] = {}
        self.restarting: dict[str, asyncio.Task] = {}

    async def respond(self, req: UserRequest) -> UserTurnOutput:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
        while True:
            if not self.alive and self.restarting:   # every engine is down: wait for a replacement
                await asyncio.wait(list(self.restarting.values()))
            name = self.pick(req.dialogue_id)
            self.in_flight[name] += 1
            try:
                return await self.actors[name].respond.remote(req)
            except (RayActorError, ActorDiedError, ActorUnavailableError, SimulatorEngineDead) as exc:
                if name not in self.dead:
                    self.dead[name] = type(exc).__name__
                    log.warning("user simulator %s died (%s); %d engine(s) left, retrying its turns elsewhere",
                                name, type(exc).__name__, len(self.alive))
                    self._restart(name)
                self.retried_turns += 1
            finally:
                self.in_flight[name] -= 1

    def _restart(self, name: str) -> None:
        if self.restart_fn is None or name in self.restarting or self.restarts.get(name, 0) >= self.max_restarts:
            return

        async def replace() -> None:
            try:
                actor, info = await self.restart_fn(name)
            except Exception as exc:   # the pool goes on with the engines it has
                log.warning("user simulator %s could not be restarted: %r", name, exc)
                return
            finally:
                self.restarting.pop(name, None)
            self.restarts[name] = self.restarts.get(name, 0) + 1
            self.actors[name], self.info[name], self.in_flight[name] = actor, info, 0
            self.dead.pop(name, None)
            log.info("user simulator %s restarted in its bundle (restart %d)", name, self.restarts[name])
        self.restarting[name] = asyncio.ensure_future(replace())

    async def settle(self) -> None:
        """Wait for the restarts under way (before the pool is reported or shut down)."""
        while self.restarting:
            await asyncio.wait(list(self.restarting.values()))

    def report(self) -> dict:
        return {"engines": len(self.actors), "alive": len(self.alive), "dead": dict(self.dead),
                "retried_turns": self.retried_turns, "restarts": dict(self.restarts)}
