"""TrainerGroup: a Ray Train TorchTrainer, started once per run and kept alive, serving GRPO steps.

The driver posts typed requests (sead_ray.training.trainer_protocol) to a `TrainerMailbox` actor, one shard per rank;
every rank's loop (actors/trainer_rank.py) takes its request, runs it on its DeepSpeed ZeRO-3 engine, and posts a typed
result back. ZeRO-3 for real: parameters, gradients and optimizer states are partitioned over the ranks; weight sync and
checkpoints gather each parameter with every rank taking part (it is a collective) and only rank 0 keeping the full
tensor (the OpenRLHF order: gather, then send). On CPU the ranks talk over gloo, on GPUs the same code over NCCL."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import ray

from actors.trainer_mailbox import TrainerMailbox
from actors.trainer_rank import train_loop_per_worker
from sead_ray.core.roles import ROLES
from sead_ray.training.trainer_protocol import (
    LoadRequest,
    LogprobsRequest,
    ReferenceRequest,
    Sample,
    SaveRequest,
    StepMetrics,
    StepRequest,
    StopRequest,
    SyncRequest,
    SyncResult,
    TrainerError,
    TrainerSettings,
    WorkerFailure,
    WorkerReady,
    aggregate_step,
    shard_samples,
)

log = logging.getLogger(__name__)


class TrainerGroup:
    """Driver-side handle: start the TorchTrainer once, then send it GRPO steps and sync requests."""

    def __init__(self, cfg: Any, model_path: str, run_dir: Path, engines: Sequence[Any] = (), role: str = "agent"):
        self.cfg, self.role, self.run_dir = cfg, role, Path(run_dir).resolve()   # role: core.roles
        self.settings = TrainerSettings.from_config(cfg, model_path, role)
        self.engines = list(engines)     # the engines of the trained role: every weight version goes to them
        self.world = cfg.trainer.num_workers
        self.seq = 0
        self.request_lock = threading.Lock()
        self.thread: Optional[threading.Thread] = None
        self.fit_error: Optional[BaseException] = None
        self.mailbox = None
        self.ready: list[WorkerReady] = []

    def start(self) -> float:
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        from placement import worker_resources

        t0 = time.perf_counter()
        cfg = self.cfg
        self.mailbox = TrainerMailbox.remote()
        use_gpu = cfg.placement.trainer.gpus > 0
        backend = cfg.trainer.backend if cfg.trainer.backend != "auto" else ("nccl" if use_gpu else "gloo")
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config={"mailbox": self.mailbox, "engines": self.engines, "settings": self.settings},
            scaling_config=ScalingConfig(num_workers=self.world, use_gpu=use_gpu,
                                         resources_per_worker=worker_resources(cfg.placement.trainer),
                                         placement_strategy=cfg.placement.strategy),
            torch_config=TorchConfig(backend=backend),
            run_config=RunConfig(name=f"{ROLES[self.role].metric_prefix}trainer",   # trainer, user_trainer
                                 storage_path=str((self.run_dir / "ray_train").resolve())),
        )

        def fit():
            try:
                trainer.fit()
            except BaseException as exc:  # reported by the next request that waits
                self.fit_error = exc
        self.thread = threading.Thread(target=fit, name="sead-trainer-fit", daemon=True)
        self.thread.start()
        self.ready = self._results(0, cfg.trainer.start_timeout_s, "trainer.start_timeout_s")
        log.info("%s trainer: %d ZeRO-%d workers ready (%s) in %.0f s", self.role, self.world, cfg.trainer.zero_stage,
                 backend, time.perf_counter() - t0)
        return time.perf_counter() - t0

    def _results(self, seq: int, timeout_s: Optional[float] = None, key: str = "") -> list:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ref = self.mailbox.take_results.remote(seq, self.world)
        while True:
            done, _ = ray.wait([ref], timeout=2.0)
            if done:
                results = ray.get(ref)
                break
            if self.fit_error is not None or (self.thread is not None and not self.thread.is_alive()):
                raise TrainerError(f"the training workers stopped: {self.fit_error!r}")
            if deadline is not None and time.monotonic() > deadline:
                raise TrainerError(f"no answer from the training workers within {timeout_s:.0f} s{key and f' ({key})'}")
        failures = sorted((r for r in results if isinstance(r, WorkerFailure)), key=lambda f: f.arrival)
        if failures:
            raise TrainerError(f"training rank {failures[0].rank} failed:\n{failures[0].traceback}")
        return results

    def _request(self, request: Any, shards: Optional[list] = None, timeout_s: Optional[float] = None) -> list:
        """Post a request to every rank and wait for their results (at most `trainer.timeout_s`). One at a
        time: a replacement engine's weight push (from a thread) never interleaves with a step."""
        with self.request_lock:
            self.seq += 1
            ray.get(self.mailbox.post_request.remote(self.seq, request, shards or [None] * self.world), timeout=60)
            return self._results(self.seq, timeout_s or self.cfg.trainer.timeout_s)

    def step(self, samples: Sequence[Sample], lr: Optional[float] = None, reset_optimizer_after: bool = False
             ) -> StepMetrics:
        """One GRPO update on the batch (at `lr`, default train.lr; then the optimizer's state cleared if asked);
        returns the step's figures over the batch."""
        from sead_ray.training.shared_prefix import shared_root
        t0 = time.perf_counter()
        shards = shard_samples(samples, self.world, self.settings.grad_accum_steps * self.settings.micro_batch_size)
        root = shared_root([s.token_ids for s in samples], [s.loss_mask for s in samples], self.settings.max_seq_len) \
            if self.settings.shared_prefix == "auto" else []
        results = self._request(StepRequest(round(sum(sum(s.loss_mask) for s in samples)), lr, reset_optimizer_after, root),
                                shards)
        return aggregate_step(results, time.perf_counter() - t0)

    def sync_weights(self, version: int, engines: Optional[Sequence[Any]] = None) -> SyncResult:
        """Send the current weights as `version` to the role's engines: those given (a changed list, an
        engine was replaced) or the ones of the previous sync. Both roles by the configured transport.
        WeightSyncFailed (the trainer goes on) when an engine received other weights than were sent."""
        sync = self.cfg.weight_sync
        if engines is not None:
            self.engines = list(engines)
        return self._request(SyncRequest(version, sync.transport, sync.bucket_mb,
                                         getattr(self.cfg, self.role).tensor_parallel_size,   # agent, user
                                         None if engines is None else self.engines, sync.timeout_s, sync.verify),
                             timeout_s=sync.timeout_s)[0].checked()

    def save(self, directory: Path) -> float:
        return max(self._request(SaveRequest(str(directory))))

    def load(self, directory: Path) -> None:
        if not all(self._request(LoadRequest(str(directory)))):
            raise TrainerError(f"no DeepSpeed state found under {directory}/deepspeed")

    def set_reference(self, model_path: Path) -> None:
        """The KL's reference model becomes the one in `model_path` (an HF folder) on every rank."""
        self._request(ReferenceRequest(str(model_path)))

    def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Trainer-side logprobs of given sequences (every rank computes the same shard: the forward
        passes are collectives under ZeRO-3)."""
        return self._request(LogprobsRequest(), [token_ids] * self.world)[0]

    def stop(self, timeout_s: float = 120) -> None:
        if self.mailbox is None or (self.thread is not None and not self.thread.is_alive()):
            return   # never started, or the training run already ended (a rank failed)
        try:
            self._request(StopRequest(), timeout_s=timeout_s)
        except Exception as exc:
            log.warning("trainer did not stop cleanly: %r", exc)
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)
