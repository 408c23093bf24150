"""TrainerGroup: a Ray Train TorchTrainer, started once per run and kept alive, serving GRPO steps.

The driver posts typed requests (sead_ray.training.trainer_protocol) to a `TrainerMailbox` actor, one shard per rank; every
worker loop takes its request, runs it on its DeepSpeed ZeRO-3 engine, and posts a typed result back. ZeRO-3 for
real: parameters, gradients and optimizer states are partitioned over the ranks; weight sync and checkpoints gather
each parameter with every rank taking part (it is a collective) and only rank 0 keeping the full tensor (the
OpenRLHF order: gather, then send). On CPU the ranks talk over gloo, on GPUs the same code over NCCL."""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import ray

from actors.trainer_mailbox import TrainerMailbox
from sead_ray.core.roles import ROLES
from sead_ray.training.trainer_protocol import (
    CUDA_ALLOC_CONF,
    LoadRequest,
    LogprobsRequest,
    RankStepResult,
    Sample,
    SaveRequest,
    StepMetrics,
    StepRequest,
    StopRequest,
    SyncRequest,
    SyncResult,
    TrainerError,
    TrainerSettings,
    WeightSyncFailed,
    WorkerFailure,
    WorkerReady,
    aggregate_step,
    deepspeed_config,
    shard_samples,
)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- worker side

def _release_freed_memory() -> None:
    """Hand the step's freed activations back to the OS (glibc keeps freed heap otherwise): an idle trainer
    then holds its weights and optimizer state only, e.g. while a second trainer group steps (user.train)."""
    import ctypes
    import gc
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):   # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class _Worker:
    """Everything one training rank holds: the DeepSpeed engine(s); each request is one method."""

    def __init__(self, settings: TrainerSettings):
        from actors.ds_ops import own_ninja_first
        own_ninja_first()
        import deepspeed
        import torch
        import torch.distributed as dist
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.integrations import HfDeepSpeedConfig

        self.settings = s = settings
        # Ray Train set up torch.distributed; DeepSpeed's comm layer wraps that group (without this,
        # zero.Init at load time would see a world of 1).
        deepspeed.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        if self.device.type == "cuda":   # before the model's first allocation (Ray Train already made the context)
            torch.cuda.memory._set_allocator_settings(CUDA_ALLOC_CONF)
        torch.manual_seed(s.seed + self.rank)
        if s.threads:
            torch.set_num_threads(s.threads)
        ds_config = deepspeed_config(s, self.world)
        dtype = getattr(torch, s.dtype)
        # Kept alive so from_pretrained partitions the weights at load time (zero.Init) under ZeRO-3.
        self._hf_ds = HfDeepSpeedConfig(ds_config) if s.zero_stage == 3 else None
        model = AutoModelForCausalLM.from_pretrained(s.model_path, dtype=dtype)
        model.config.use_cache = False
        if s.gradient_checkpointing:
            # A 6-turn call is ~2k tokens: stored activations of every layer dominated the workers' memory.
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.tokenizer = AutoTokenizer.from_pretrained(s.model_path)
        self.pad_id = self.tokenizer.pad_token_id or 0
        optimizer = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.999), weight_decay=0.0)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config,
                                                                  dist_init_required=False)
        self.engine.train()   # from_pretrained leaves eval mode, in which HF skips gradient checkpointing
        self.shared_prefix = s.shared_prefix == "auto" and self._shared_prefix_supported(model)
        self.ref = None
        if s.kl_coef > 0:
            ref_config = {k: v for k, v in ds_config.items() if k != "gradient_clipping"}
            ref_model = AutoModelForCausalLM.from_pretrained(s.model_path, dtype=dtype)
            ref_model.requires_grad_(False)
            if self.shared_prefix:
                from sead_ray.training.shared_prefix import install
                install(ref_model)
            self.ref, *_ = deepspeed.initialize(model=ref_model, config=ref_config, dist_init_required=False)
            self.ref.eval()
        self.steps, self.transport = 0, None     # the actors.weights.senders transport is built at the first sync

    def ready(self) -> WorkerReady:
        params = list(self.engine.module.parameters())
        if self.settings.zero_stage == 3:
            local, total = sum(p.ds_tensor.numel() for p in params), sum(p.ds_numel for p in params)
        else:
            local = total = sum(p.numel() for p in params)
        return WorkerReady(self.rank, self.settings.zero_stage, int(local), int(total), os.getpid(),
                           ray.get_runtime_context().get_node_id())

    def _shared_prefix_supported(self, model: Any) -> bool:
        """Route the model's attention through the shared prefix (trainer.shared_prefix: auto), or say why not."""
        from sead_ray.training.shared_prefix import install, unsupported_reason
        reason = unsupported_reason(model)
        if reason is not None:
            if self.rank == 0:
                log.warning("trainer.shared_prefix: off for this model (%s); every call is computed in full", reason)
            return False
        install(model)
        return True

    def _forward(self, engine: Any, temperature: Optional[float] = None):
        """Logprobs as the rollouts sampled them (the training temperature) unless `temperature` is given."""
        from sead_ray.training.grpo import ModelForward
        return ModelForward(engine, self.device, self.settings.temperature if temperature is None else temperature,
                            entropy_grad=self.settings.entropy_coef > 0)

    def step(self, request: StepRequest, shard: list[Sample]) -> RankStepResult:
        """One GRPO update over this rank's shard."""
        from sead_ray.training.grpo import gradient_norm, grpo_update, micro_batches
        from sead_ray.training.warm_start import reset_optimizer_state
        t0, s = time.perf_counter(), self.settings
        root = request.shared_root if self.shared_prefix else ()
        batches = micro_batches(shard, s.micro_batch_size, self.pad_id, s.max_seq_len, pad_to=s.grad_accum_steps,
                                root=root)
        self.engine.optimizer.param_groups[0]["lr"] = request.lr or s.lr   # one group; the warm start has its own rate
        norm_at_zero0 = None

        def backward_and_step(loss):
            nonlocal norm_at_zero0
            self.engine.backward(loss)     # at the boundary, ZeRO-0 has all-reduced the gradients here
            if s.zero_stage == 0 and self.engine.is_gradient_accumulation_boundary():
                norm_at_zero0 = gradient_norm(self.engine.module.parameters())
            self.engine.step()
        result = grpo_update(self._forward(self.engine), backward_and_step, batches, s, rank=self.rank,
                             world_size=self.world, global_tokens=request.global_tokens,
                             reference=self._forward(self.ref) if self.ref is not None else None, root=root)
        if request.reset_optimizer_after:
            reset_optimizer_state(self.engine.optimizer)
        self.steps += 1
        _release_freed_memory()
        grad_norm = self.engine.get_global_grad_norm() if s.zero_stage else norm_at_zero0
        result.grad_norm = None if grad_norm is None else float(grad_norm)
        result.seconds, result.peak_mem_mb = time.perf_counter() - t0, self._peak_memory_mb()
        return result

    def _peak_memory_mb(self) -> float:
        """Peak accelerator memory on GPUs; on CPU the process's peak resident set since it started."""
        import resource

        import torch
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KiB on Linux

    def weights(self) -> Any:
        from actors.weights.senders import GatheredWeights
        return GatheredWeights(self.engine.module, self.settings.zero_stage, self.rank)

    def sync_weights(self, request: SyncRequest, engines: list) -> Optional[SyncResult]:
        """Every rank takes part (gathers are collectives); rank 0 ships to every engine of the trained role."""
        if self.transport is None or request.engines is not None:   # the first sync, or an engine was replaced
            from actors.weights.senders import make_transport
            if self.transport is not None:
                self.transport.close()
            self.transport = make_transport(request.transport, engines=engines if request.engines is None else
                                            request.engines, rank=self.rank, bucket_mb=request.bucket_mb,
                                            workers_per_engine=request.workers_per_engine, timeout_s=request.timeout_s,
                                            verify=request.verify)
        return self.transport.send(self.weights(), request.version)

    def save(self, request: SaveRequest) -> float:
        """HF folder (model + tokenizer, loadable by transformers and vLLM) and DeepSpeed state."""
        t0 = time.perf_counter()
        directory = Path(request.directory)
        full = {name: t.detach().to("cpu", copy=True) for name, t in self.weights() if self.rank == 0}
        if self.rank == 0:
            hf = directory / "hf"
            hf.mkdir(parents=True, exist_ok=True)
            self.engine.module.save_pretrained(hf, state_dict=full, safe_serialization=True)
            self.tokenizer.save_pretrained(hf)
        self.engine.save_checkpoint(str(directory / "deepspeed"), tag="state")
        return time.perf_counter() - t0

    def load(self, request: LoadRequest) -> bool:
        path, _ = self.engine.load_checkpoint(str(Path(request.directory) / "deepspeed"), tag="state",
                                              load_optimizer_states=True, load_lr_scheduler_states=True)
        return path is not None

    def logprobs(self, request: LogprobsRequest, token_ids: list[list[int]]) -> list[list[float]]:
        """Logprob of each token given its prefix (index 0 gets 0.0), for rollout/trainer agreement."""
        import torch

        from sead_ray.training.grpo import micro_batches
        samples = [Sample(ids, [1] * len(ids), [0.0] * len(ids), 0.0) for ids in token_ids]
        out = []
        with torch.no_grad():
            for b in micro_batches(samples, self.settings.micro_batch_size, self.pad_id, self.settings.max_seq_len):
                lp, _ = self._forward(self.engine, request.temperature).logprobs(b, False)
                for row, mask in zip(lp.cpu().tolist(), b.attention_mask[:, 1:].tolist()):
                    out.append([0.0] + [v for v, m in zip(row, mask) if m])
        return out


def train_loop_per_worker(config: dict) -> None:
    """Ray Train entry: build the engine, then serve requests until a StopRequest."""
    import traceback

    import ray.train
    mailbox = config["mailbox"]
    rank = ray.train.get_context().get_world_rank()
    try:
        worker = _Worker(config["settings"])
        ray.get(mailbox.post_result.remote(0, rank, worker.ready()))
    except Exception:
        ray.get(mailbox.post_result.remote(0, rank, WorkerFailure(rank, traceback.format_exc())))
        return
    handlers = {
        StepRequest: worker.step,
        SyncRequest: lambda request, _: worker.sync_weights(request, config["engines"]),
        SaveRequest: lambda request, _: worker.save(request),
        LoadRequest: lambda request, _: worker.load(request),
        LogprobsRequest: worker.logprobs,
        StopRequest: lambda request, _: None,
    }
    seq = 1
    while True:
        request, shard = ray.get(mailbox.take_request.remote(seq, rank))
        try:
            result = handlers[type(request)](request, shard)
        except Exception as exc:
            # The driver gets the traceback at once. After a failed weight sync every rank is past its part
            # (the driver may sync again to other engines); any other failure ends the training run, so that
            # Ray Train tears down the ranks left waiting in a collective instead of leaving them hung.
            result = WorkerFailure(rank, traceback.format_exc())
            if not isinstance(exc, WeightSyncFailed):
                ray.get(mailbox.post_result.remote(seq, rank, result))
                raise
        ray.get(mailbox.post_result.remote(seq, rank, result))
        if isinstance(request, StopRequest):
            return
        if isinstance(result, RankStepResult):
            ray.train.report({"step": worker.steps, "loss": result.loss_sum / max(1, result.tokens)})
        seq += 1


# --------------------------------------------------------------------------- driver side

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
