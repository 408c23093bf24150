"""Sticky least-loaded routing over a pool of engine actors (shared by the agent and user pools).

Each dialogue goes to the live engine with the fewest requests in flight and stays there while it
lives, so its growing prompt stays in that engine's prefix cache.
"""
from __future__ import annotations

import asyncio
from typing import Any


class NoEngineError(RuntimeError):
    """Every engine of a pool is dead."""


class StickyRouter:
    role = "engine"

    def __init__(self, actors: dict[str, Any]):
        self.actors: dict[str, Any] = {}
        self.info: dict[str, dict] = {}       # name -> start-up info (node id, placement index, ...)
        self.in_flight: dict[str, int] = {}
        self.affinity: dict[str, str] = {}
        self.dead: dict[str, str] = {}
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

    def pick(self, dialogue_id: str) -> str:
        name = self.affinity.get(dialogue_id)
        if name is None or name in self.dead:
            alive = self.alive
            if not alive:
                raise NoEngineError(f"all {len(self.actors)} {self.role} engines are dead: {self.dead}")
            name = min(alive, key=lambda n: (self.in_flight[n], n))
            self.affinity[dialogue_id] = name
        return name

    def release(self, dialogue_id: str) -> None:
        self.affinity.pop(dialogue_id, None)

    async def call_alive(self, method: str, *args) -> list:
        """`method` on every live engine actor, together."""
        return await asyncio.gather(*(getattr(self.actors[n], method).remote(*args) for n in self.alive))

    async def shutdown(self) -> None:
        await asyncio.gather(*(self.actors[n].shutdown.remote() for n in self.alive), return_exceptions=True)
