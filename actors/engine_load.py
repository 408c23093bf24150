"""An engine's load, as its own scheduler reports it after every step (EngineLoad), and the vLLM stat logger that
feeds it and the engine's load gauges (engine_load_logger). vLLM is imported inside the engine-owning process."""
from __future__ import annotations

import time
from typing import Any, Optional


class EngineLoad:
    """The engine's load as its own scheduler reports it after every step: the time some request was
    running (busy), running requests x time, and prompt tokens looked up in / served from the prefix
    cache, so a window's busy fraction, mean batch size and prefix-cache hit rate."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.since = self.last_t = time.perf_counter()
        self.last_running = 0
        self.busy_s = self.running_s = 0.0
        self.prefix_queries = self.prefix_hits = 0

    def record(self, running: int, prefix_queries: int = 0, prefix_hits: int = 0) -> None:
        now = time.perf_counter()
        self.prefix_queries += prefix_queries
        self.prefix_hits += prefix_hits
        if self.last_running > 0:
            self.busy_s += now - self.last_t
            self.running_s += self.last_running * (now - self.last_t)
        self.last_t, self.last_running = now, running

    def window(self, reset: bool = False) -> dict:
        """Figures since the last reset (and start a new window if `reset`)."""
        wall = max(time.perf_counter() - self.since, 1e-9)
        figures = {"wall_s": wall, "busy_fraction": self.busy_s / wall,
                   "mean_running": self.running_s / max(self.busy_s, 1e-9),
                   "prefix_hit_rate": self.prefix_hits / max(self.prefix_queries, 1),
                   "prefix_queries": self.prefix_queries, "prefix_hits": self.prefix_hits}
        if reset:
            self.reset()
        return figures


def engine_load_logger(load: EngineLoad, tags: Optional[dict] = None, gauges: Any = None) -> type:
    """A vLLM stat logger class fed the scheduler's stats each step: it keeps `load` and, with `gauges`,
    sets the engine's load gauges: requests running and waiting, KV cache usage (0-1) and the prefix
    cache's hit rate so far."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class EngineLoadLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0):
            self.prefix_queries = self.prefix_hits = 0   # since start, for the hit-rate gauge

        def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                   engine_idx: int = 0) -> None:
            if scheduler_stats is None:
                return
            prefix = scheduler_stats.prefix_cache_stats
            looked_up = (prefix.queries, prefix.hits) if prefix is not None else (0, 0)
            load.record(scheduler_stats.num_running_reqs, *looked_up)
            if gauges is None:
                return
            self.prefix_queries += looked_up[0]
            self.prefix_hits += looked_up[1]
            gauges.set("engine_requests_running", scheduler_stats.num_running_reqs, tags)
            gauges.set("engine_requests_waiting", scheduler_stats.num_waiting_reqs, tags)
            gauges.set("engine_kv_cache_usage", scheduler_stats.kv_cache_usage, tags)
            if self.prefix_queries:
                gauges.set("engine_prefix_cache_hit_rate", self.prefix_hits / self.prefix_queries, tags)

        def log_engine_initialized(self) -> None:
            pass

    return EngineLoadLogger
