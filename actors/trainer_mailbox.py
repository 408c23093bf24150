"""The exchange between the driver and the training ranks (actors.trainer): typed requests in, one shard per rank,
typed results out, keyed by (sequence, rank)."""
from __future__ import annotations

import asyncio
from typing import Any

import ray

from sead_ray.training.trainer_protocol import WorkerFailure


@ray.remote(num_cpus=0)
class TrainerMailbox:
    """Request/result exchange between the driver and the training ranks, keyed by (sequence, rank)."""

    def __init__(self):
        self.requests: dict = {}
        self.results: dict = {}
        self.failures = 0
        self.cond = asyncio.Condition()

    async def post_request(self, seq: int, request: Any, shards: list) -> None:
        async with self.cond:
            for rank, shard in enumerate(shards):
                self.requests[(seq, rank)] = (request, shard)
            self.cond.notify_all()

    async def take_request(self, seq: int, rank: int) -> tuple:
        async with self.cond:
            await self.cond.wait_for(lambda: (seq, rank) in self.requests)
            return self.requests.pop((seq, rank))

    async def post_result(self, seq: int, rank: int, result: Any) -> None:
        async with self.cond:
            if isinstance(result, WorkerFailure):
                self.failures += 1
                result.arrival = self.failures
            self.results[(seq, rank)] = result
            self.cond.notify_all()

    async def take_results(self, seq: int, world_size: int) -> list:
        """Every rank's result, or as soon as one rank failed: the results so far (None where missing), so
        that a failure reaches the driver while the other ranks may still wait in a collective."""
        def ready() -> bool:
            got = [self.results.get((seq, r)) for r in range(world_size)]
            return all((seq, r) in self.results for r in range(world_size)) or any(
                isinstance(x, WorkerFailure) for x in got)
        async with self.cond:
            await self.cond.wait_for(ready)
            return [self.results.pop((seq, r), None) for r in range(world_size)]
