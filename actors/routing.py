"""Sticky least-loaded routing over a pool of engine actors (shared by the agent and user pools), and
the restart of a dead engine in its bundle.

Each dialogue goes to the live engine with the fewest requests in flight and stays there while it
lives, so its growing prompt stays in that engine's prefix cache. An engine found dead is marked so
and, given a `restart_fn`, replaced in the background (at most `max_restarts` times per engine); while
every engine is down, new requests wait for a replacement instead of failing.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Optional

log = logging.getLogger(__name__)


class NoEngineError(RuntimeError):
    """Every engine of a pool is dead."""


class EngineDeadError(RuntimeError):
    """The actor is alive but its engine is not (a pool treats it like a dead actor)."""


def actor_death_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean "this engine is gone" (Ray imported lazily)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
    return RayActorError, ActorDiedError, ActorUnavailableError, EngineDeadError


class StickyRouter:
    role = "engine"

    def __init__(self, actors: dict[str, Any], restart_fn: Optional[Callable[[str], Awaitable[tuple]]] = None,
                 max_restarts: int = 3, request_timeout_s: Optional[float] = None):
        self.request_timeout_s = request_timeout_s   # a request taking longer: the engine counts as hung
        self.actors: dict[str, Any] = {}
        self.info: dict[str, dict] = {}       # name -> start-up info (node id, placement index, ...)
        self.in_flight: dict[str, int] = {}
        self.affinity: dict[str, str] = {}
        self.dead: dict[str, str] = {}
        self.restart_fn, self.max_restarts = restart_fn, max_restarts
        self.restarts: dict[str, int] = {}
        self.restarting: dict[str, asyncio.Task] = {}
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

    async def pick_live(self, dialogue_id: str) -> str:
        """`pick`, first waiting for a replacement when every engine is down but one is being restarted."""
        while not self.alive and self.restarting:
            await asyncio.wait(list(self.restarting.values()))
        return self.pick(dialogue_id)

    async def request(self, name: str, method: str, *args, **kwargs) -> Any:
        """`method` on engine `name`; a dead or hung engine is marked (and restarted) and the error raised."""
        self.in_flight[name] += 1
        try:
            return await asyncio.wait_for(getattr(self.actors[name], method).remote(*args, **kwargs),
                                          self.request_timeout_s)
        except asyncio.TimeoutError:
            self.mark_dead(name, f"no answer within {self.request_timeout_s:.0f} s")
            raise EngineDeadError(f"{self.role} engine {name} did not answer within {self.request_timeout_s:.0f} s") \
                from None
        except actor_death_errors() as exc:
            self.mark_dead(name, type(exc).__name__)
            raise
        finally:
            self.in_flight[name] -= 1

    def release(self, dialogue_id: str) -> None:
        self.affinity.pop(dialogue_id, None)

    def mark_dead(self, name: str, reason: str) -> None:
        """Record a dead engine (once) and start its replacement."""
        if name in self.dead or name not in self.actors:
            return
        self.dead[name] = reason
        log.warning("%s engine %s died (%s); %d engine(s) left", self.role, name, reason, len(self.alive))
        if self.restart_fn is None or name in self.restarting or self.restarts.get(name, 0) >= self.max_restarts:
            return

        async def replace() -> None:
            try:
                actor, info = await self.restart_fn(name)
            except Exception as exc:   # the pool goes on with the engines it has
                log.warning("%s engine %s could not be restarted: %r", self.role, name, exc)
                return
            finally:
                self.restarting.pop(name, None)
            self.restarts[name] = self.restarts.get(name, 0) + 1
            self.actors[name], self.info[name], self.in_flight[name] = actor, info, 0
            self.dead.pop(name, None)
            log.info("%s engine %s restarted in its bundle (restart %d)", self.role, name, self.restarts[name])
        self.restarting[name] = asyncio.ensure_future(replace())

    async def probe(self, timeout_s: float = 30.0) -> list[str]:
        """Ask every engine thought alive for a sign of life; mark (and restart) those that are gone."""
        names = self.alive
        results = await asyncio.gather(*(asyncio.wait_for(self.actors[n].stats.remote(), timeout_s) for n in names),
                                       return_exceptions=True)
        gone = [n for n, r in zip(names, results) if isinstance(r, (*actor_death_errors(), asyncio.TimeoutError))]
        for name in gone:
            self.mark_dead(name, "no answer to a probe")
        return gone

    async def settle(self) -> None:
        """Wait for the restarts under way (before the pool is reported, synced or shut down)."""
        while self.restarting:
            await asyncio.wait(list(self.restarting.values()))

    async def call_alive(self, method: str, *args) -> list:
        """`method` on every live engine actor, together."""
        return await asyncio.gather(*(getattr(self.actors[n], method).remote(*args) for n in self.alive))

    async def shutdown(self) -> None:
        await asyncio.gather(*(self.actors[n].shutdown.remote() for n in self.alive), return_exceptions=True)
