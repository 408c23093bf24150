"""TrainerGroup: a Ray Train TorchTrainer, started once per run and kept alive, serving GRPO steps.

The driver sends commands (step, sync weights, save, load, logprobs, stop) through a `StepBuffer`
actor, one payload shard per rank; every worker loop pulls its shard, runs the command on its
DeepSpeed ZeRO-3 engine, and posts its result back. ZeRO-3 for real: parameters, gradients and
optimizer states are partitioned over the ranks; weight sync and checkpoints gather each parameter
with every rank taking part (it is a collective) and only rank 0 keeping the full tensor (the
OpenRLHF order: gather, then send).

On CPU: gloo, 2 workers. On GPUs: the same code with NCCL.
"""
from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import ray

log = logging.getLogger(__name__)


@ray.remote(num_cpus=0)
class StepBuffer:
    """Mailbox between the driver and the training workers: commands by (seq, rank), results back."""

    def __init__(self):
        self.commands: dict = {}
        self.results: dict = {}
        self.cond = asyncio.Condition()

    async def put_command(self, seq: int, command: dict, shards: list) -> None:
        async with self.cond:
            for rank, shard in enumerate(shards):
                self.commands[(seq, rank)] = (command, shard)
            self.cond.notify_all()

    async def get_command(self, seq: int, rank: int) -> tuple:
        async with self.cond:
            await self.cond.wait_for(lambda: (seq, rank) in self.commands)
            return self.commands.pop((seq, rank))

    async def post_result(self, seq: int, rank: int, result: Any) -> None:
        async with self.cond:
            self.results[(seq, rank)] = result
            self.cond.notify_all()

    async def get_results(self, seq: int, world_size: int, timeout: Optional[float] = None) -> list:
        async with self.cond:
            await asyncio.wait_for(self.cond.wait_for(
                lambda: all((seq, r) in self.results for r in range(world_size))), timeout)
            return [self.results.pop((seq, r)) for r in range(world_size)]


class TrainerError(RuntimeError):
    """A training worker failed; the message carries its traceback."""


@dataclass
class Sample:
    """One trajectory as the trainer needs it (crosses process boundaries)."""
    token_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]
    advantage: float


# --------------------------------------------------------------------------- worker side

def _ds_config(cfg: dict, world_size: int, gas: int) -> dict:
    return {
        "train_micro_batch_size_per_gpu": cfg["micro_batch_size"],
        "gradient_accumulation_steps": gas,
        "train_batch_size": cfg["micro_batch_size"] * gas * world_size,
        "gradient_clipping": cfg["grad_clip"],
        "zero_optimization": {"stage": cfg["zero_stage"], "stage3_param_persistence_threshold": 0,
                              "stage3_gather_16bit_weights_on_model_save": False},
        "zero_allow_untested_optimizer": True,   # a plain torch AdamW: no JIT-built CPU Adam needed
        "bf16": {"enabled": cfg["dtype"] == "bfloat16"},
        "fp16": {"enabled": cfg["dtype"] == "float16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


class _Worker:
    """Everything one training rank holds: the DeepSpeed engine(s) and the GRPO step."""

    def __init__(self, cfg: dict):
        import deepspeed
        import torch
        import torch.distributed as dist
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.integrations import HfDeepSpeedConfig

        self.cfg = cfg
        # Ray Train set up torch.distributed; DeepSpeed's comm layer wraps that group (without this,
        # zero.Init at load time would see a world of 1).
        deepspeed.init_distributed(dist_backend=dist.get_backend(), auto_mpi_discovery=False)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        torch.manual_seed(cfg["seed"] + self.rank)
        self.gas = cfg["grad_accum_steps"]
        ds_config = _ds_config(cfg, self.world, self.gas)
        dtype = getattr(torch, cfg["dtype"])
        # Kept alive so from_pretrained partitions the weights at load time (zero.Init) under ZeRO-3.
        self._hf_ds = HfDeepSpeedConfig(ds_config) if cfg["zero_stage"] == 3 else None
        model = AutoModelForCausalLM.from_pretrained(cfg["model_path"], dtype=dtype)
        model.config.use_cache = False
        if cfg["gradient_checkpointing"]:
            # A 6-turn call is ~2k tokens: stored activations of every layer dominated the workers' memory.
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.tokenizer = AutoTokenizer.from_pretrained(cfg["model_path"])
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.999), weight_decay=0.0)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config,
                                                                  dist_init_required=False)
        self.engine.train()   # from_pretrained leaves eval mode, in which HF skips gradient checkpointing
        self.ref = None
        if cfg["kl_coef"] > 0:
            ref_config = {k: v for k, v in ds_config.items() if k not in ("gradient_clipping",)}
            ref_model = AutoModelForCausalLM.from_pretrained(cfg["model_path"], dtype=dtype)
            ref_model.requires_grad_(False)
            self.ref, *_ = deepspeed.initialize(model=ref_model, config=ref_config, dist_init_required=False)
            self.ref.eval()
        self.steps = 0

    def partition_info(self) -> dict:
        """Parameter elements this rank holds vs the model's total (ZeRO-3 partitions them)."""
        params = list(self.engine.module.parameters())
        if self.cfg["zero_stage"] == 3:
            local = sum(p.ds_tensor.numel() for p in params)
            total = sum(p.ds_numel for p in params)
        else:
            local = total = sum(p.numel() for p in params)
        return {"zero_stage": self.cfg["zero_stage"], "local_params": int(local), "total_params": int(total)}

    # -- helpers

    def _forward_logprobs(self, engine, batch, with_entropy: bool):
        """Per-target logprobs [B, L-1] (and entropies) of a collated batch.

        Logits are computed only from the first position any row trains on (`logits_to_keep`): the
        shared system prompt comes first and a full-vocabulary head over it would dominate the cost."""
        import torch

        ids = batch.input_ids.to(self.device)
        B, L = ids.shape
        trained = batch.loss_mask.sum(0).nonzero()
        first = int(trained[0]) if len(trained) else L - 2
        keep = L - first
        out = engine(input_ids=ids, attention_mask=batch.attention_mask.to(self.device), logits_to_keep=keep)
        logits = out.logits[:, :-1].float()                                   # predicts targets first..L-2
        # logit(target) - logsumexp: unlike log_softmax, no second full-vocabulary tensor is kept for backward.
        lse = torch.logsumexp(logits, dim=-1)
        part = logits.gather(-1, ids[:, L - keep + 1:].unsqueeze(-1)).squeeze(-1) - lse
        logprobs = torch.zeros((B, L - 1), dtype=part.dtype, device=part.device)
        logprobs[:, L - keep:] = part
        entropy = None
        if with_entropy:
            # Only in the autograd graph when it is trained on: a full-vocabulary term is costly.
            with torch.set_grad_enabled(torch.is_grad_enabled() and self.cfg["entropy_coef"] > 0):
                entropy = torch.zeros_like(logprobs)
                entropy[:, L - keep:] = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
        return logprobs, entropy

    def _micro_batches(self, samples: Sequence[Sample], pad_to: Optional[int] = None):
        """Collated micro-batches; padded to `pad_to` with empty-mask samples because every rank must
        run the same number of forward passes (under ZeRO-3 they are collectives)."""
        from sead_ray.grpo import collate
        mbs = self.cfg["micro_batch_size"]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        chunks = [list(samples[i:i + mbs]) for i in range(0, len(samples), mbs)]
        if pad_to is not None:
            if len(chunks) > pad_to:
                raise ValueError(f"rank {self.rank} got {len(chunks)} micro-batches, more than the {pad_to} configured")
            chunks += [[Sample([pad, pad], [0, 0], [0.0, 0.0], 0.0)]] * (pad_to - len(chunks))
        return [collate([s.token_ids for s in c], [s.loss_mask for s in c], [s.rollout_logprobs for s in c],
                        [s.advantage for s in c], pad_id=pad, max_len=self.cfg["max_seq_len"]) for c in chunks]

    # -- commands

    def step(self, samples: list[Sample], global_tokens: int) -> dict:
        """One GRPO update over this rank's shard (ppo_epochs optimizer steps)."""
        import torch

        from sead_ray.grpo import policy_loss
        t0 = time.perf_counter()
        batches = self._micro_batches(samples, pad_to=self.gas)
        cfg = self.cfg
        # Old logprobs: with one epoch the policy that sampled is the one being updated, so the current
        # forward pass detached is exact; with more epochs they are recomputed once before updating.
        old = None
        if cfg["ppo_epochs"] > 1:
            with torch.no_grad():
                old = [self._forward_logprobs(self.engine, b, False)[0] for b in batches]
        refs = None
        if self.ref is not None:
            with torch.no_grad():
                refs = [self._forward_logprobs(self.ref, b, False)[0] for b in batches]
        # sum over tokens / all agent tokens of the global batch, x world x gas to undo DeepSpeed's
        # averaging over ranks and its 1/gas scaling: the exact token-level mean of the whole batch.
        normalizer = max(1, global_tokens) / (self.world * self.gas)
        stats = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_fraction": 0.0, "tokens": 0}
        mismatch_sum, mismatch_max, mismatch_n = 0.0, 0.0, 0
        for epoch in range(cfg["ppo_epochs"]):
            for i, b in enumerate(batches):
                logprobs, entropy = self._forward_logprobs(self.engine, b, True)
                mask = b.loss_mask.to(self.device)
                if epoch == 0:  # rollout (vLLM) vs trainer logprobs of the same sampled tokens
                    diff = ((logprobs.detach() - b.old_logprobs.to(self.device)).abs() * mask)
                    mismatch_sum += float(diff.sum())
                    mismatch_max = max(mismatch_max, float(diff.max()) if mask.any() else 0.0)
                    mismatch_n += int(mask.sum())
                old_lp = old[i] if old is not None else logprobs.detach()
                loss, s = policy_loss(logprobs, old_lp, b.advantages.to(self.device), mask, cfg["clip_eps"],
                                      ref_logprobs=refs[i] if refs is not None else None, kl_coef=cfg["kl_coef"],
                                      entropy=entropy, entropy_coef=cfg["entropy_coef"], normalizer=normalizer)
                self.engine.backward(loss)
                self.engine.step()
                if epoch == 0:
                    for k in ("pg_loss", "kl", "entropy", "clip_fraction"):
                        stats[k] += getattr(s, k) * s.tokens
                    stats["loss"] += s.loss
                    stats["tokens"] += s.tokens
        self.steps += 1
        grad_norm = self.engine.get_global_grad_norm()
        return {"rank": self.rank, "tokens": stats["tokens"], "loss_sum": stats["loss"],
                "pg_loss_sum": stats["pg_loss"], "kl_sum": stats["kl"], "entropy_sum": stats["entropy"],
                "clip_sum": stats["clip_fraction"],
                "grad_norm": None if grad_norm is None else float(grad_norm),
                "mismatch_sum": mismatch_sum, "mismatch_max": mismatch_max, "mismatch_tokens": mismatch_n,
                "seconds": time.perf_counter() - t0, "peak_mem_mb": self._peak_memory_mb(),
                "seq_tokens": int(sum(int(b.attention_mask.sum()) for b in batches))}

    def _peak_memory_mb(self) -> float:
        """Peak accelerator memory on GPUs; on CPU the process's peak resident set since it started."""
        import resource

        import torch
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KiB on Linux

    def gathered_params(self):
        """Yield (name, full tensor on CPU) on rank 0; every rank must iterate (collective)."""
        import deepspeed
        for name, param in self.engine.module.named_parameters():
            if self.cfg["zero_stage"] == 3:
                with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
                    full = param.data.detach().to("cpu", copy=True) if self.rank == 0 else None
            else:
                full = param.data.detach().to("cpu", copy=True) if self.rank == 0 else None
            yield name, full

    def sync_weights(self, version: int, transport: str, bucket_mb: int, agent: Any) -> dict:
        from actors.weight_sync import publish
        t0 = time.perf_counter()
        stream = ((n, t) for n, t in self.gathered_params())
        if self.rank != 0:
            for _ in stream:
                pass
            return {"rank": self.rank}
        handle = publish(((n, t) for n, t in stream), version, transport, bucket_mb)
        gather_publish = time.perf_counter() - t0
        info = ray.get(agent.apply_weights.remote(handle)) if agent is not None else {}
        return {"rank": 0, "version": version, "mb": handle.nbytes / 2**20, "gather_publish_s": gather_publish,
                "apply_s": info.get("apply_s"), "total_s": time.perf_counter() - t0}

    def save(self, directory: str) -> dict:
        """HF folder (model + tokenizer, loadable by transformers and vLLM) and DeepSpeed state."""
        t0 = time.perf_counter()
        directory = Path(directory)
        full = {}
        for name, t in self.gathered_params():
            if self.rank == 0:
                full[name] = t
        if self.rank == 0:
            hf = directory / "hf"
            hf.mkdir(parents=True, exist_ok=True)
            self.engine.module.save_pretrained(hf, state_dict=full, safe_serialization=True)
            self.tokenizer.save_pretrained(hf)
        self.engine.save_checkpoint(str(directory / "deepspeed"), tag="state")
        return {"rank": self.rank, "seconds": time.perf_counter() - t0}

    def load(self, directory: str) -> dict:
        path, _ = self.engine.load_checkpoint(str(Path(directory) / "deepspeed"), tag="state",
                                              load_optimizer_states=True, load_lr_scheduler_states=True)
        return {"rank": self.rank, "loaded": path is not None}

    def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Logprob of each token given its prefix (index 0 gets 0.0), for rollout/trainer agreement."""
        import torch

        samples = [Sample(ids, [1] * len(ids), [0.0] * len(ids), 0.0) for ids in token_ids]
        out = []
        with torch.no_grad():
            for b in self._micro_batches(samples):
                lp, _ = self._forward_logprobs(self.engine, b, False)
                for row, mask in zip(lp.cpu().tolist(), b.attention_mask[:, 1:].tolist()):
                    out.append([0.0] + [v for v, m in zip(row, mask) if m])
        return out[: len(token_ids)]


def train_loop_per_worker(config: dict) -> None:
    """Ray Train entry: build the engine, then serve commands until `stop`."""
    import traceback

    import ray.train
    buffer = config["buffer"]
    rank = ray.train.get_context().get_world_rank()
    try:
        worker = _Worker(config)
        ray.get(buffer.post_result.remote(0, rank, {"ready": True, "rank": rank, **worker.partition_info()}))
    except Exception:
        ray.get(buffer.post_result.remote(0, rank, {"error": traceback.format_exc()}))
        return
    seq = 1
    while True:
        command, shard = ray.get(buffer.get_command.remote(seq, rank))
        op = command["op"]
        try:
            if op == "stop":
                result = {"stopped": True}
            elif op == "step":
                result = worker.step(shard, command["global_tokens"])
            elif op == "sync":
                result = worker.sync_weights(command["version"], command["transport"], command["bucket_mb"],
                                             config.get("agent"))
            elif op == "save":
                result = worker.save(command["directory"])
            elif op == "load":
                result = worker.load(command["directory"])
            elif op == "logprobs":
                result = worker.logprobs(shard) if shard else []
            else:
                result = {"error": f"unknown command {op!r}"}
        except Exception:
            result = {"error": traceback.format_exc()}
        ray.get(buffer.post_result.remote(seq, rank, result))
        if op == "stop":
            return
        if op == "step":
            ray.train.report({"step": worker.steps, "loss": result.get("loss_sum", 0.0)})
        seq += 1


# --------------------------------------------------------------------------- driver side

class TrainerGroup:
    """Driver-side handle: start the TorchTrainer once, then send it GRPO steps and sync commands."""

    def __init__(self, cfg: Any, model_path: str, run_dir: Path, agent: Any = None):
        self.cfg = cfg
        self.model_path = model_path
        self.run_dir = Path(run_dir).resolve()
        self.agent = agent
        self.world = cfg.trainer.num_workers
        n = cfg.train.batch_size * cfg.train.rollouts_per_profile
        self.grad_accum_steps = max(1, math.ceil(math.ceil(n / self.world) / cfg.train.micro_batch_size))
        self.seq = 0
        self.thread: Optional[threading.Thread] = None
        self.fit_error: Optional[BaseException] = None
        self.buffer = None
        self.ready: list = []

    def start(self, timeout_s: float = 900) -> float:
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        t0 = time.perf_counter()
        cfg = self.cfg
        self.buffer = StepBuffer.remote()
        use_gpu = cfg.placement.trainer.gpus > 0
        backend = cfg.trainer.backend if cfg.trainer.backend != "auto" else ("nccl" if use_gpu else "gloo")
        resources = {"CPU": cfg.placement.trainer.cpus}
        if use_gpu:
            resources["GPU"] = cfg.placement.trainer.gpus
        if cfg.placement.trainer.node_resource:
            resources[cfg.placement.trainer.node_resource] = 1.0
        loop_config = {
            "buffer": self.buffer, "agent": self.agent, "model_path": self.model_path, "seed": cfg.seed,
            "dtype": cfg.models.dtype, "lr": cfg.train.lr, "zero_stage": cfg.trainer.zero_stage,
            "micro_batch_size": cfg.train.micro_batch_size, "grad_accum_steps": self.grad_accum_steps,
            "grad_clip": cfg.train.grad_clip, "clip_eps": cfg.train.clip_eps, "kl_coef": cfg.train.kl_coef,
            "entropy_coef": cfg.train.entropy_coef, "ppo_epochs": cfg.train.ppo_epochs,
            "max_seq_len": cfg.train.max_seq_len, "gradient_checkpointing": cfg.train.gradient_checkpointing,
        }
        trainer = TorchTrainer(
            train_loop_per_worker, train_loop_config=loop_config,
            scaling_config=ScalingConfig(num_workers=self.world, use_gpu=use_gpu, resources_per_worker=resources,
                                         placement_strategy=cfg.placement.strategy),
            torch_config=TorchConfig(backend=backend),
            run_config=RunConfig(name="trainer", storage_path=str((self.run_dir / "ray_train").resolve())),
        )

        def fit():
            try:
                trainer.fit()
            except BaseException as exc:  # reported by the next command that waits
                self.fit_error = exc
        self.thread = threading.Thread(target=fit, name="sead-trainer-fit", daemon=True)
        self.thread.start()
        self.ready = self._results(0, timeout_s)
        log.info("trainer: %d ZeRO-%d workers ready (%s) in %.0f s", self.world, cfg.trainer.zero_stage, backend,
                 time.perf_counter() - t0)
        return time.perf_counter() - t0

    def _results(self, seq: int, timeout_s: Optional[float] = None) -> list:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ref = self.buffer.get_results.remote(seq, self.world)
        while True:
            done, _ = ray.wait([ref], timeout=2.0)
            if done:
                results = ray.get(ref)
                break
            if self.fit_error is not None or (self.thread is not None and not self.thread.is_alive()):
                raise TrainerError(f"the training workers stopped: {self.fit_error!r}")
            if deadline is not None and time.monotonic() > deadline:
                raise TrainerError(f"no answer from the training workers within {timeout_s:.0f} s")
        errors = [r["error"] for r in results if isinstance(r, dict) and "error" in r]
        if errors:
            raise TrainerError("a training worker failed:\n" + errors[0])
        return results

    def _command(self, command: dict, shards: Optional[list] = None) -> list:
        self.seq += 1
        ray.get(self.buffer.put_command.remote(self.seq, command, shards or [None] * self.world))
        return self._results(self.seq)

    def shard(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        """Spread samples over ranks, longest first, balancing token counts."""
        shards: list[list[Sample]] = [[] for _ in range(self.world)]
        loads = [0] * self.world
        for s in sorted(samples, key=lambda s: -len(s.token_ids)):
            candidates = [r for r in range(self.world) if len(shards[r]) < self.grad_accum_steps * self.cfg.train.micro_batch_size]
            r = min(candidates or range(self.world), key=lambda r: loads[r])
            shards[r].append(s)
            loads[r] += len(s.token_ids)
        return shards

    def step(self, samples: Sequence[Sample]) -> dict:
        """One GRPO update on the batch; returns aggregated training metrics."""
        global_tokens = sum(sum(s.loss_mask) for s in samples)
        t0 = time.perf_counter()
        results = self._command({"op": "step", "global_tokens": global_tokens}, self.shard(samples))
        wall = time.perf_counter() - t0
        tokens = sum(r["tokens"] for r in results)
        mismatch_tokens = sum(r["mismatch_tokens"] for r in results)
        per_token = lambda key: sum(r[key] for r in results) / max(1, tokens)  # noqa: E731
        return {"loss": sum(r["loss_sum"] for r in results) / max(1, len(results)), "pg_loss": per_token("pg_loss_sum"),
                "kl": per_token("kl_sum"), "entropy": per_token("entropy_sum"), "clip_fraction": per_token("clip_sum"),
                "grad_norm": results[0]["grad_norm"], "agent_tokens": tokens, "step_s": wall,
                "tokens_per_s": sum(r["seq_tokens"] for r in results) / wall if wall > 0 else 0.0,
                "logprob_mismatch_mean": sum(r["mismatch_sum"] for r in results) / max(1, mismatch_tokens),
                "logprob_mismatch_max": max(r["mismatch_max"] for r in results),
                "peak_mem_mb": max(r["peak_mem_mb"] for r in results)}

    def sync_weights(self, version: int) -> dict:
        results = self._command({"op": "sync", "version": version, "transport": self.cfg.weight_sync.transport,
                                 "bucket_mb": self.cfg.weight_sync.bucket_mb})
        return results[0]

    def save(self, directory: Path) -> dict:
        return {"seconds": max(r["seconds"] for r in self._command({"op": "save", "directory": str(directory)}))}

    def load(self, directory: Path) -> None:
        results = self._command({"op": "load", "directory": str(directory)})
        if not all(r["loaded"] for r in results):
            raise TrainerError(f"no DeepSpeed state found under {directory}/deepspeed")

    def logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Trainer-side logprobs of given sequences (every rank computes the same shard: the forward
        passes are collectives under ZeRO-3)."""
        return self._command({"op": "logprobs"}, [token_ids] * self.world)[0]

    def stop(self, timeout_s: float = 120) -> None:
        if self.buffer is None:
            return
        try:
            self._command({"op": "stop"})
        except Exception as exc:
            log.warning("trainer did not stop cleanly: %r", exc)
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)
