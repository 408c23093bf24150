"""The reference code's turn-synchronous schedule, as a wrapper around the rollout endpoints (the
rollout benchmark's baseline; the production path is per-dialogue asynchronous): every live dialogue
takes its agent turn together, then its user turn together; a finished dialogue leaves."""
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
