"""vLLM's weight-sync client protocol over our engine actors (the `gloo` and `nccl` transports: vLLM's trainer
engine talks to one inference deployment; ours is a pool of separate engines)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Optional


class EnginePoolClient:
    """vLLM's weight-sync client protocol (`VLLMWeightSyncClient`) over the engine actors of the trained role.

    vLLM's trainer engines address one inference deployment whose workers sit at group ranks
    `rank_offset + worker rank`; our pool is several separate engines, so engine i's workers are
    shifted by i x workers per engine."""

    def __init__(self, engines: list, workers_per_engine: int):
        self.engines, self.workers_per_engine = engines, workers_per_engine
        self.version = 0
        self.digest = False                      # this version's engines digest what they receive
        self.received: list = []                 # per engine, its workers' digests (or None) of the last version
        self.apply_s: Optional[float] = None

    @property
    def world_size(self) -> int:
        return 1 + len(self.engines) * self.workers_per_engine

    def _all(self, call: Callable[[int, Any], Any]) -> list:
        import ray
        return ray.get([call(i, engine) for i, engine in enumerate(self.engines)])

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        def shifted(i: int) -> dict:
            if "rank_offset" not in init_info:
                return init_info
            return {**init_info, "rank_offset": init_info["rank_offset"] + i * self.workers_per_engine}
        self._all(lambda i, a: a.init_weight_transfer_engine.remote(shifted(i)))

    def start_weight_update(self) -> None:
        self._t0 = time.perf_counter()
        self._all(lambda i, a: a.start_weight_update.remote(self.digest))

    def update_weights(self, update_info: dict) -> None:
        self._all(lambda i, a: a.update_weights.remote(update_info))

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        finished = self._all(lambda i, a: a.finish_weight_update.remote(self.version))
        self.received = [f["received"] for f in finished]
        self.apply_s = time.perf_counter() - self._t0
