"""UserSimActor (the frozen user role-play model) and the pool router that spreads dialogues over them.

Back-ends behind one interface, `respond(UserRequest) -> UserTurnOutput`:
- `vllm`: a frozen LLM on a vLLM AsyncLLM engine, decoding under the JSON schema of a user turn;
- `rule`: the transparent state machine of sead_ray.rule_user (no engine).
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Optional

import ray

from actors.vllm_engine import EngineSpec, VLLMEngine
from sead_ray.dialogue import UserRequest, UserTurnOutput
from sead_ray.prompts.user import parse_user_output, user_messages, user_output_schema
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

    def _prompt_ids(self, req: UserRequest) -> list[int]:
        profile = req.profile
        initial = None if profile.free_form else profile.state
        agent, user = list(req.agent_replies), list(req.user_replies)
        budget = self.spec.max_model_len - self.sampling["max_tokens"]
        while True:
            messages = user_messages(self.scenario, profile.behaviors, initial, req.current_state, agent, user)
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) <= budget or len(agent) <= 1:
                return ids
            agent, user = agent[1:], user[1:]   # a long call: keep the latest exchanges

    async def respond(self, req: UserRequest) -> UserTurnOutput:
        self.turns += 1
        if self.engine is None:
            out = self.rule.respond(req)
            out.engine = self.name
            return out
        try:
            gen = await self.engine.generate(self._prompt_ids(req), json_schema=self.schema, seed=req.seed,
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

    async def reset_prefix_cache(self) -> None:
        """Forget cached prompt prefixes (benchmarks compare schedules from a cold cache)."""
        if self.engine is not None:
            await self.engine.reset_prefix_cache()

    def stats(self) -> dict:
        return {"name": self.name, "turns": self.turns}

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()


class NoUserSimulatorError(RuntimeError):
    """Every engine of the pool is dead."""


class UserSimPool:
    """Routes each user turn to the least-loaded live engine and keeps a dialogue on one engine while
    it lives (its prompt prefix stays in that engine's cache). If an engine dies, the turn is retried
    on another engine: the dialogue's state lives in the driver, so nothing is lost; the loss is
    counted and reported."""

    def __init__(self, actors: dict[str, Any]):
        self.actors: dict[str, Any] = {}
        self.info: dict[str, dict] = {}       # name -> start-up info (node id, placement index, ...)
        self.in_flight: dict[str, int] = {}
        self.affinity: dict[str, str] = {}
        self.dead: dict[str, str] = {}
        self.retried_turns = 0
        for name, actor in actors.items():
            self.add(name, actor, {})

    def add(self, name: str, actor: Any, info: dict) -> None:
        self.actors[name], self.info[name], self.in_flight[name] = actor, dict(info), 0

    def remove(self, name: str) -> Any:
        """Take an engine out of the pool (between iterations); returns its actor handle."""
        self.affinity = {d: n for d, n in self.affinity.items() if n != name}
        self.in_flight.pop(name, None)
        self.info.pop(name, None)
        self.dead.pop(name, None)
        return self.actors.pop(name)

    @property
    def alive(self) -> list[str]:
        return [n for n in self.actors if n not in self.dead]

    def _pick(self, dialogue_id: str) -> str:
        name = self.affinity.get(dialogue_id)
        if name is None or name in self.dead:
            alive = self.alive
            if not alive:
                raise NoUserSimulatorError(f"all {len(self.actors)} user simulator engines are dead: {self.dead}")
            name = min(alive, key=lambda n: (self.in_flight[n], n))
            self.affinity[dialogue_id] = name
        return name

    def release(self, dialogue_id: str) -> None:
        self.affinity.pop(dialogue_id, None)

    async def respond(self, req: UserRequest) -> UserTurnOutput:
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
        while True:
            name = self._pick(req.dialogue_id)
            self.in_flight[name] += 1
            try:
                return await self.actors[name].respond.remote(req)
            except (RayActorError, ActorDiedError, ActorUnavailableError, SimulatorEngineDead) as exc:
                if name not in self.dead:
                    self.dead[name] = type(exc).__name__
                    log.warning("user simulator %s died (%s); %d engine(s) left, retrying its turns elsewhere",
                                name, type(exc).__name__, len(self.alive))
                self.retried_turns += 1
            finally:
                self.in_flight[name] -= 1

    def report(self) -> dict:
        return {"engines": len(self.actors), "alive": len(self.alive), "dead": dict(self.dead),
                "retried_turns": self.retried_turns}

    async def shutdown(self) -> None:
        await asyncio.gather(*(self.actors[n].shutdown.remote() for n in self.alive), return_exceptions=True)
