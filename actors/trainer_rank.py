"""One rank of the trainer (actors.trainer.TrainerGroup): the Ray Train worker loop that builds its DeepSpeed ZeRO engine
and serves the driver's typed requests (sead_ray.training.trainer_protocol) one by one from the TrainerMailbox: a GRPO
step on its shard, a weight sync (every rank gathers, rank 0 sends), a checkpoint save or load, logprobs, the KL's
reference model."""
from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

import ray

from sead_ray.training.trainer_protocol import (
    CUDA_ALLOC_CONF,
    LoadRequest,
    LogprobsRequest,
    RankStepResult,
    ReferenceRequest,
    Sample,
    SaveRequest,
    StepRequest,
    StopRequest,
    SyncRequest,
    SyncResult,
    TrainerSettings,
    WeightSyncFailed,
    WorkerFailure,
    WorkerReady,
    deepspeed_config,
)

log = logging.getLogger(__name__)


def _release_freed_memory() -> None:
    """Hand the step's freed activations back to the OS (glibc keeps freed heap otherwise): an idle trainer
    then holds its weights and optimizer state only, e.g. while a second trainer group steps (user.train)."""
    import ctypes
    import gc
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):   # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class RankWorker:
    """Everything one training rank holds: the DeepSpeed engine(s); each request is one method."""

    def __init__(self, settings: TrainerSettings):
        import torch

        from actors.ds_ops import build_collective_op, own_ninja_first
        own_ninja_first()
        if not torch.cuda.is_available():   # before init_distributed, which would build it under torch's lock only
            build_collective_op()
        import deepspeed
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
        self.ds_config, self.ref = ds_config, None
        if s.reference_path is not None:
            self.reference(ReferenceRequest(s.reference_path))
        self.steps, self.transport = 0, None     # the actors.weights.senders transport is built at the first sync

    def reference(self, request: ReferenceRequest, _shard: Any = None) -> None:
        """The KL's reference model, loaded from an HF folder (the start model, or the rehearsed agent's checkpoint);
        frozen, the same ZeRO stage as the policy (HfDeepSpeedConfig partitions it at load under ZeRO-3)."""
        import deepspeed
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(request.model_path, dtype=getattr(torch, self.settings.dtype))
        model.requires_grad_(False)
        if self.shared_prefix:
            from sead_ray.training.shared_prefix import install
            install(model)
        config = {k: v for k, v in self.ds_config.items() if k != "gradient_clipping"}
        self.ref, *_ = deepspeed.initialize(model=model, config=config, dist_init_required=False)
        self.ref.eval()
        _release_freed_memory()   # the reference it replaces

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
        worker = RankWorker(config["settings"])
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
        ReferenceRequest: worker.reference,
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
