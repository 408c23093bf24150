"""What a run keeps: checkpoints of the last completed iteration, written in the background while the next
iteration's calls play, and the failure policy (a stop request or a failure checkpoints the last completed iteration
first, unless the weights are already past it or the trainer that would write it is what failed)."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Optional

from sead_ray.training.checkpoint import CheckpointError, TrainState, save_checkpoint
from sead_ray.training.trainer_protocol import TrainerError

log = logging.getLogger(__name__)


class StopRequested(Exception):
    """Ctrl-C or SIGTERM: end at the next safe point with a checkpoint."""


class ProgressKeeper:
    """The run's checkpoints: at most one being written at a time, the last one's iteration and how long it took."""

    def __init__(self, cfg: Any, system: Any, run_dir: Path, saved_iteration: int):
        self.cfg, self.system, self.run_dir = cfg, system, Path(run_dir)
        self.saved_iteration = saved_iteration
        self.last_save_s: Optional[float] = None   # how long the run's last checkpoint took to write
        self.saving: Optional[asyncio.Task] = None  # the checkpoint being written (at most one at a time)
        self.trainer_saving: Optional[asyncio.Future] = None   # done once the trainer's part of it is written

    async def trainer_written(self, iteration: int) -> None:
        """Before a GRPO step: the trainer's weights are the checkpoint's until it wrote them."""
        if self.trainer_saving is not None and not self.trainer_saving.done():
            log.info("iter %d: the GRPO step waits for the trainer to write the checkpoint", iteration)
            await self.trainer_saving

    async def save(self, state: TrainState, stopping: bool = False, force: bool = False, wait: bool = False) -> None:
        """Checkpoint `state`, the last completed iteration (if not saved yet; `force`: the warm start's iteration 0),
        in the background unless `wait` or train.checkpoint_in_background is off; a save still in flight ends first.
        `stopping`: not when the run's last save took longer than train.stop_save_max_s and a checkpoint exists
        (the stop must end in time)."""
        await self.saved()
        if state.iteration <= self.saved_iteration and not force:
            return
        limit = self.cfg.train.stop_save_max_s
        if stopping and self.saved_iteration and self.last_save_s is not None and self.last_save_s > limit:
            log.warning("stopping without a checkpoint of iteration %d: the last save took %.0f s (train.stop_save_max_s "
                        "= %.0f); a resume continues after iteration %d", state.iteration, self.last_save_s, limit,
                        self.saved_iteration)
            return
        loop, staging = asyncio.get_running_loop(), self.cfg.train.checkpoint_staging_dir
        trainer_saving = self.trainer_saving = loop.create_future()

        async def write() -> None:
            t0 = time.perf_counter()
            await asyncio.to_thread(save_checkpoint, self.system.save_weights, self.run_dir, state,
                                    self.cfg.train.keep_checkpoints, Path(staging) if staging else None,
                                    self.system.move_checkpoint if staging else None,
                                    lambda: loop.call_soon_threadsafe(trainer_saving.set_result, None))
            self.saved_iteration, self.last_save_s = state.iteration, time.perf_counter() - t0
        self.saving = asyncio.ensure_future(write())
        if wait or not self.cfg.train.checkpoint_in_background:
            await self.saved()

    async def saved(self) -> None:
        """Wait for the checkpoint being written, if one is (its failure is raised here)."""
        if self.saving is None:
            return
        try:
            await asyncio.shield(self.saving)   # a cancelled wait leaves the writer to finish, and to be waited for
        finally:
            if self.saving.done():
                self.saving = None

    async def _saved_or_logged(self) -> None:
        """After a failure: let a checkpoint in flight end (it holds a completed iteration), its own error only logged."""
        try:
            await self.saved()
        except Exception as exc:
            log.error("the checkpoint being written when the run failed did not complete: %r", exc)

    async def keeping_progress(self, run: Callable[[], Awaitable[None]], done: Callable[[], TrainState],
                               weights_ahead: Callable[[], bool]) -> bool:
        """`run()`; on a stop request (returns True) or any failure (re-raised) the last completed iteration
        (`done()`) is checkpointed first, so nothing done is lost."""
        try:
            await run()
            return False
        except (StopRequested, asyncio.CancelledError):
            await self.save(done(), stopping=True, wait=True)
            return True
        except Exception as failure:   # not KeyboardInterrupt: a second Ctrl-C means leave now
            if weights_ahead():   # the weights no longer match the last completed iteration
                await self._saved_or_logged()
                log.error("the failure came after a GRPO step of an unfinished iteration: no checkpoint written; "
                          "resume from the last one (iteration %d)", self.saved_iteration)
                raise
            if isinstance(failure, (TrainerError, CheckpointError)):   # saving needs the trainer that just failed
                await self._saved_or_logged()
                log.error("the trainer or its checkpoint failed: no checkpoint written; resume from the last one "
                          "(iteration %d)", self.saved_iteration)
                raise
            try:
                await self.save(done(), wait=True)
            except Exception as exc:   # e.g. the trainer itself is what failed: report the first error
                log.error("could not checkpoint iteration %d after the failure: %r", done().iteration, exc)
            raise
