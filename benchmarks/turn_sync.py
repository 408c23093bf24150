"""Schedules of the rollout benchmark, as wrappers around the rollout endpoints:

- the reference code's turn-synchronous schedule (the baseline; the production path is per-dialogue
  asynchronous): every live dialogue takes its agent turn together, then its user turn together; a
  finished dialogue leaves;
- a recording of every request a schedule made, and its replay with no dialogue dependencies: all
  requests at once, the engines' ceiling for that work."""
from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any


class TurnBarrier:
    """Nobody passes until every live dialogue has arrived; a finished dialogue leaves."""

    def __init__(self, parties: int):
        self.parties, self.waiting = parties, 0
        self.event = asyncio.Event()

    def _release_if_full(self) -> None:
        if self.waiting and self.waiting >= self.parties:
            self.event.set()
            self.event = asyncio.Event()
            self.waiting = 0

    async def wait(self) -> None:
        event = self.event
        self.waiting += 1
        self._release_if_full()
        if not event.is_set():
            await event.wait()

    def leave(self) -> None:
        self.parties -= 1
        self._release_if_full()


class _LockstepAgent:
    def __init__(self, inner: Any, barrier: TurnBarrier):
        self.inner, self.barrier = inner, barrier

    async def generate(self, dialogue_id: str, prompt_ids: list[int], **kwargs):
        await self.barrier.wait()
        return await self.inner.generate(dialogue_id, prompt_ids, **kwargs)

    def release(self, dialogue_id: str) -> None:
        self.barrier.leave()
        self.inner.release(dialogue_id)


class _LockstepUsers:
    def __init__(self, inner: Any, barrier: TurnBarrier):
        self.inner, self.barrier = inner, barrier
        self.turns_seen: set = set()

    async def respond(self, request):
        key = (request.dialogue_id, request.turn_index)
        if key not in self.turns_seen:        # a retried user turn does not wait again
            self.turns_seen.add(key)
            await self.barrier.wait()
        return await self.inner.respond(request)

    def release(self, dialogue_id: str) -> None:
        self.barrier.leave()
        self.inner.release(dialogue_id)


def turn_sync_endpoints(endpoints: Any, n_dialogues: int) -> Any:
    """The same endpoints, forced into lock-step turns across `n_dialogues` dialogues."""
    return replace(endpoints, agent=_LockstepAgent(endpoints.agent, TurnBarrier(n_dialogues)),
                   users=_LockstepUsers(endpoints.users, TurnBarrier(n_dialogues)))


class _RecordingAgent:
    def __init__(self, inner: Any, calls: list):
        self.inner, self.calls = inner, calls

    async def generate(self, dialogue_id: str, prompt_ids: list[int], **kwargs):
        self.calls.append(("agent", dialogue_id, list(prompt_ids or []), kwargs))
        return await self.inner.generate(dialogue_id, prompt_ids, **kwargs)

    def release(self, dialogue_id: str) -> None:
        self.inner.release(dialogue_id)


class _RecordingUsers:
    def __init__(self, inner: Any, calls: list):
        self.inner, self.calls = inner, calls

    async def respond(self, request):
        self.calls.append(("user", request.dialogue_id, request, {}))
        return await self.inner.respond(request)

    def release(self, dialogue_id: str) -> None:
        self.inner.release(dialogue_id)


def recording_endpoints(endpoints: Any, calls: list) -> Any:
    """The same endpoints, appending every agent and user request to `calls`."""
    return replace(endpoints, agent=_RecordingAgent(endpoints.agent, calls), users=_RecordingUsers(endpoints.users, calls))


async def replay(endpoints: Any, calls: list) -> float:
    """Every recorded request at once (same prompts, same seeds, so the same generations), each under its
    own routing key: the wall time of the same work without the turns' dependencies."""
    import time
    from dataclasses import replace as with_id

    async def one(i: int, call: tuple) -> None:
        role, dialogue_id, payload, kwargs = call
        key = f"replay-{i}-{dialogue_id}"
        try:
            if role == "agent":
                await endpoints.agent.generate(key, payload, **kwargs)
            else:
                await endpoints.users.respond(with_id(payload, dialogue_id=key))
        finally:
            (endpoints.agent if role == "agent" else endpoints.users).release(key)
    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, c) for i, c in enumerate(calls)))
    return time.perf_counter() - t0
