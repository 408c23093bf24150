"""Memory plan per GPU (or per CPU worker) of a run config, computed from the model's shape (pure), and
whether it fits the device.

Trainer ranks hold ZeRO-3 shards of the parameters, gradients and optimizer state (or, offloaded, only the
parameters), DeepSpeed's bounded buffers (reduce bucket, parameters gathered in flight, the optimizer
step's temporaries), the untied embeddings and lm_head gathered whole with a full-size gradient, the
activations of one micro-batch (with gradient checkpointing, the layer inputs plus one layer's
recompute), the logits of the trained agent tokens only, and on a GPU the CUDA context and NCCL
communicators (rank 0 one more, for the weight sync). Engines hold their share of the weights, their runtime
(context, CUDA graphs, activations, sampler), what a weight sync holds while it lands (engines of a trained role)
and the KV cache (configured, or with `engine.kv_cache_mb: auto` what `max_num_seqs` calls at their longest need,
capped by the device on GPU).

A role fits when its total is within the device's memory less FIT_MARGIN (allocator fragmentation and
what no line counts); `sead-ray plan` refuses a config where one does not (exit 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from sead_ray.core.roles import trained_roles
from sead_ray.ops.model_shape import DTYPE_BYTES, GIB, ModelShape
from sead_ray.training.trainer_protocol import (
    ENTROPY_CHUNK_POSITIONS,
    MAX_LIVE_PARAMETERS,
    REDUCE_BUCKET_ELEMENTS,
    SUB_GROUP_ELEMENTS,
)

# The device, beyond what torch's allocator reports: the CUDA context of a process (with lazy module loading)
# and the buffers of one NCCL communicator; vLLM's captured CUDA graphs. Upper estimates;
# benchmarks/gpu_check.py measures the first two on the GPU it runs on.
CUDA_CONTEXT_BYTES = int(0.75 * GIB)
NCCL_COMMUNICATOR_BYTES = int(0.5 * GIB)
CUDA_GRAPHS_BYTES = int(1.0 * GIB)
# Share of the device a plan may not use: allocator fragmentation and what no line counts.
FIT_MARGIN = 0.05
# vLLM's chunked prefill works on at most this many tokens at once (its default for a GPU engine).
PREFILL_CHUNK_TOKENS = 8192
# float32 logits, their gradient, logsumexp's softmax in backward and the bf16 copies on each side: bytes
# per trained position and vocabulary entry (grpo.forward_logprobs)
LOGIT_BYTES = 16
# The system prompt every call of a step shares, as the plan assumes it (the demo's is 639 tokens): with
# trainer.shared_prefix on, its activations are held once per micro-batch pass, not once per row
SHARED_PREFIX_TOKENS = 1024


def trained_positions(cfg: Any) -> int:
    """Logit positions of one micro-batch: its rows times the positions some row trains on (only the agent's
    generated tokens: at most max_turns turns of max_tokens each per call, within max_seq_len)."""
    mbs = cfg.train.micro_batch_size
    per_call = cfg.dialogue.max_turns * cfg.dialogue.agent_train.max_tokens
    return mbs * min(cfg.train.max_seq_len, mbs * per_call)


def trainer_plan(cfg: Any, m: ModelShape, rank0: bool = True) -> dict[str, float]:
    """Bytes per trainer rank (rank 0 by default, the largest), by item."""
    world, b = cfg.trainer.num_workers, DTYPE_BYTES[cfg.models.dtype]
    zero3 = cfg.trainer.zero_stage == 3
    shard = world if zero3 else 1
    offload = cfg.trainer.offload_optimizer
    seq, mbs = cfg.train.max_seq_len, cfg.train.micro_batch_size
    master = 4 if b < 4 else 0                       # fp32 master weights next to bf16 ones
    optimizer_shard = m.params / (world if cfg.trainer.zero_stage >= 1 else 1)
    # the shared prefix (trainer.shared_prefix, assumed of SHARED_PREFIX_TOKENS) is held once, not once per row
    shared = min(SHARED_PREFIX_TOKENS, seq // 2) if cfg.trainer.shared_prefix == "auto" else 0
    held = shared + mbs * (seq - shared)
    layer_activations = 34 * held * m.hidden * b // 2   # Korthikanti et al., flash attention (no s^2 term)
    embedding = m.vocab * m.hidden * b
    positions = trained_positions(cfg)
    plan = {
        "parameters (ZeRO-3 shard)" if zero3 else "parameters": m.params * b / shard,
        ("gradients (shard" if zero3 else "gradients (") + ("; in CPU memory)" if offload else ")"):
            0 if offload else m.params * b / shard,
        "optimizer: Adam m, v, fp32 master" + ("; in CPU memory" if offload else ""):
            0 if offload else optimizer_shard * (8 + master),
        # the fp32 copy of one sub-group's gradients and Adam's temporaries; offloaded, the bf16 copy back
        "optimizer-step temporaries (one sub-group)": (min(SUB_GROUP_ELEMENTS, optimizer_shard) * b if offload
                                                       else 3 * min(SUB_GROUP_ELEMENTS, optimizer_shard) * 4),
        # DeepSpeed's reduce bucket and the flat copy it reduce-scatters
        "DeepSpeed reduce bucket": 2 * REDUCE_BUCKET_ELEMENTS * b,
        "gathered parameters in flight (max live + a layer)": (MAX_LIVE_PARAMETERS + m.layer_params) * b if zero3 else 0,
        # gathered whole by ZeRO-3 (the embeddings and lm_head of an untied model both stay gathered between
        # forward and backward) and the lm_head's full-size gradient before it is reduce-scattered
        "embeddings + lm_head gathered, full-size gradient": ((1 if m.tied_embeddings else 2) * embedding + embedding
                                                              if zero3 else embedding),
        "activations (1 micro-batch" + (f"; {shared:,}-token prefix once)" if shared else ")"):
            m.layers * held * m.hidden * b + layer_activations if cfg.train.gradient_checkpointing
            else m.layers * layer_activations,
        f"logits of trained positions ({positions:,})": positions * m.vocab * LOGIT_BYTES,
    }
    if cfg.train.entropy_coef > 0:    # the entropy is trained: a softmax and its product kept for backward
        plan["entropy softmax (entropy_coef > 0)"] = 2 * positions * m.vocab * 4
    else:                             # only reported: chunks without grad
        plan[f"entropy, reported ({ENTROPY_CHUNK_POSITIONS}-position chunks)"] = (
            2 * mbs * min(positions, ENTROPY_CHUNK_POSITIONS) * m.vocab * 4)
    if shared:   # its keys and values expanded over the micro-batch's rows and joined to theirs; an fp32 gradient sum
        plan["shared prefix: keys and values over the rows"] = shared * 2 * m.layers * m.kv_heads * m.head_dim * (
            2 * mbs * b + 4)
    if cfg.train.kl_coef > 0:
        plan["reference model (shard)"] = m.params * b / shard
    if cfg.placement.trainer.gpus > 0:
        # the trainer's process group; rank 0 also joins the engines' communicator to send the weights
        communicators = 1 + (1 if rank0 and cfg.weight_sync.transport == "nccl" else 0)
        plan[f"CUDA context + {communicators} NCCL communicator(s)"] = (CUDA_CONTEXT_BYTES
                                                                       + communicators * NCCL_COMMUNICATOR_BYTES)
    return plan


def offloaded_host_bytes(cfg: Any, m: ModelShape) -> float:
    """CPU memory one rank's offloaded optimizer takes: fp32 master, Adam m and v, bf16 gradient shard."""
    b = DTYPE_BYTES[cfg.models.dtype]
    shard = m.params / (cfg.trainer.num_workers if cfg.trainer.zero_stage >= 1 else 1)
    return shard * (8 + (4 if b < 4 else 0) + b)


def kv_bytes_per_token(cfg: Any, m: ModelShape, tensor_parallel: int) -> float:
    """K and V of every layer for one token, on one of `tensor_parallel` devices."""
    return 2 * m.layers * m.kv_heads * m.head_dim * DTYPE_BYTES[cfg.models.dtype] / tensor_parallel


# Chat-template, quoting and state-line tokens around each exchange of a call (an upper estimate)
TEMPLATE_TOKENS_PER_TURN = 32
# With `engine.kv_cache_mb: auto` on CPU, the KV caches take at most this share of the memory available
# when the engines start (the trainer and the engines' weights need the rest), split among the engines.
AUTO_KV_SHARE = 0.25


def call_tokens(cfg: Any, prompt_tokens: int) -> int:
    """The longest call an engine holds: the system prompt and `max_turns` exchanges at their token caps,
    within max_model_len."""
    d = cfg.dialogue
    per_turn = max(d.agent_train.max_tokens, d.agent_eval.max_tokens) + d.user.max_tokens + TEMPLATE_TOKENS_PER_TURN
    return min(cfg.engine.max_model_len, prompt_tokens + d.max_turns * per_turn)


def engine_runtime_bytes(cfg: Any, m: ModelShape, tensor_parallel: int, takes_weights: bool = False) -> float:
    """What a GPU engine holds besides weights and KV cache: the CUDA context, its CUDA graphs, one prefill
    chunk's activations (the MLP's widest tensors), the sampler's float32 logits of every running call, and
    an NCCL communicator per group it is in (tensor parallel; the weight sync's when it `takes_weights`)."""
    b = DTYPE_BYTES[cfg.models.dtype]
    activations = PREFILL_CHUNK_TOKENS * (4 * m.intermediate // tensor_parallel + 4 * m.hidden) * b
    sampler = 3 * cfg.engine.max_num_seqs * m.vocab * 4
    communicators = (1 if tensor_parallel > 1 else 0) + (1 if takes_weights and cfg.weight_sync.transport == "nccl" else 0)
    return CUDA_CONTEXT_BYTES + CUDA_GRAPHS_BYTES + activations + sampler + communicators * NCCL_COMMUNICATOR_BYTES


def weight_receive_bytes(cfg: Any, m: ModelShape) -> float:
    """What a sync holds on an engine while the weights land: the largest tensor (embeddings or lm_head, far above a
    bucket: one chunk) twice, as received and as the layer vLLM's layerwise reload builds before copying it into
    place, and two `weight_sync.bucket_mb` buffers. Whole tensors cross: tensor parallelism does not divide it."""
    largest = max(m.vocab, m.intermediate) * m.hidden * DTYPE_BYTES[cfg.models.dtype]
    return 2 * largest + 2 * cfg.weight_sync.bucket_mb * 2**20


def engine_fixed_items(cfg: Any, m: ModelShape, tp: int, on_gpu: bool = True, takes_weights: bool = False) -> dict:
    """Bytes per GPU of one engine besides its KV cache, by item (`takes_weights`: the engines of a trained role)."""
    items = {"weights (tensor-parallel share)": m.params * DTYPE_BYTES[cfg.models.dtype] / tp}
    if on_gpu:
        items["runtime: CUDA context and graphs, prefill, sampler, NCCL"] = engine_runtime_bytes(cfg, m, tp, takes_weights)
        if takes_weights:
            items["weight sync: 2 x largest tensor + 2 buckets"] = weight_receive_bytes(cfg, m)
    return items


def usable_bytes(device_bytes: float) -> float:
    """What a plan may fill of a device: its memory less FIT_MARGIN."""
    return device_bytes * (1 - FIT_MARGIN)


def auto_kv_cache_mb(cfg: Any, m: ModelShape, tensor_parallel: int, prompt_tokens: int,
                     available_bytes: Optional[float] = None, engines: int = 1,
                     device_bytes: Optional[float] = None, takes_weights: bool = False) -> tuple[int, str]:
    """`engine.kv_cache_mb: auto`: room for `max_num_seqs` calls at their longest (no prefix shared), at most
    AUTO_KV_SHARE of `available_bytes` split among `engines` (CPU), and on a GPU of `device_bytes` at most what its
    usable memory leaves after the engine's other items (None: no cap). Returns the MB and why, for the log."""
    per_call = call_tokens(cfg, prompt_tokens)
    need = cfg.engine.max_num_seqs * per_call * kv_bytes_per_token(cfg, m, tensor_parallel)
    why = f"{cfg.engine.max_num_seqs} calls x {per_call:,} tokens"
    if available_bytes is not None and available_bytes * AUTO_KV_SHARE / engines < need:
        need = available_bytes * AUTO_KV_SHARE / engines
        why += (f" capped at {AUTO_KV_SHARE:.0%} of the {available_bytes / GIB:.1f} GiB available, "
                f"over {engines} engine(s)")
    if device_bytes is not None:
        room = usable_bytes(device_bytes) - sum(engine_fixed_items(cfg, m, tensor_parallel, True, takes_weights).values())
        if room < need:
            need = room
            why += (f" capped by the GPU: {device_bytes / GIB:.1f} GiB less {FIT_MARGIN:.0%}, the weights, the engine's "
                    f"runtime{' and a weight sync' if takes_weights else ''} leave {max(0.0, room) / GIB:.1f} GiB")
    return max(16, int(need / 2**20)), why


def kv_cache_bytes(cfg: Any, m: ModelShape, tensor_parallel: int, device_bytes: Optional[float] = None,
                   takes_weights: bool = False) -> float:
    """The configured KV cache; for `auto`, the calls' budget with a system prompt of 1,024 tokens, capped by
    the device when it is known."""
    if cfg.engine.kv_cache_mb == "auto":
        return auto_kv_cache_mb(cfg, m, tensor_parallel, prompt_tokens=1024, device_bytes=device_bytes,
                                takes_weights=takes_weights)[0] * 2**20
    return cfg.engine.kv_cache_mb * 2**20


def engine_plan(cfg: Any, m: ModelShape, tensor_parallel: int, device_bytes: Optional[float] = None,
                on_gpu: bool = True, takes_weights: bool = False) -> dict[str, float]:
    """Bytes per GPU of one engine, by item; the KV cache last (with `auto`, what the others leave)."""
    return {**engine_fixed_items(cfg, m, tensor_parallel, on_gpu, takes_weights),
            f"KV cache (engine.kv_cache_mb: {cfg.engine.kv_cache_mb})":
                kv_cache_bytes(cfg, m, tensor_parallel, device_bytes if on_gpu else None, takes_weights)}


def engine_memory_utilization(cfg: Any, m: ModelShape, tensor_parallel: int, device_bytes: float, kv_cache_mb: int,
                              takes_weights: bool = False) -> float:
    """vLLM's `gpu_memory_utilization` for one engine: the share of the device its plan fills with this KV cache. With
    the KV cache given vLLM sizes nothing by it but starts only once that much is free (a replacement, not an OOM)."""
    total = sum(engine_fixed_items(cfg, m, tensor_parallel, True, takes_weights).values()) + kv_cache_mb * 2**20
    return min(1.0, math.ceil(1000 * total / device_bytes) / 1000)


def kv_tokens(cfg: Any, m: ModelShape, tensor_parallel: int, device_bytes: Optional[float] = None,
              takes_weights: bool = False) -> int:
    """Tokens the KV cache holds."""
    return int(kv_cache_bytes(cfg, m, tensor_parallel, device_bytes, takes_weights)
               / kv_bytes_per_token(cfg, m, tensor_parallel))


def device_memory_bytes(cfg: Any) -> Optional[float]:
    """One GPU's memory: `placement.gpu_memory_gib`, else this machine's first CUDA device (torch), else None."""
    if cfg.placement.gpu_memory_gib > 0:
        return cfg.placement.gpu_memory_gib * GIB
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return float(torch.cuda.get_device_properties(0).total_memory)


@dataclass
class RolePlan:
    """One role's memory per device: its title, items and whether it runs on a GPU."""
    role: str
    title: str
    items: dict[str, float]
    on_gpu: bool

    @property
    def total(self) -> float:
        return sum(self.items.values())


def plan_roles(cfg: Any, agent: ModelShape, user: Optional[ModelShape],
               device_bytes: Optional[float] = None) -> list[RolePlan]:
    """The trainer's rank 0 and each kind of engine, as `sead-ray plan` prints and checks them."""
    offload = ", optimizer offloaded to CPU" if cfg.trainer.offload_optimizer else ""
    roles = [RolePlan("trainer", f"trainer rank 0: {cfg.trainer.num_workers} ZeRO-{cfg.trainer.zero_stage} ranks, "
                      f"micro-batch {cfg.train.micro_batch_size} x {cfg.train.max_seq_len} tokens, gradient "
                      f"checkpointing {'on' if cfg.train.gradient_checkpointing else 'off'}{offload}",
                      trainer_plan(cfg, agent), cfg.placement.trainer.gpus > 0)]
    trained = trained_roles(cfg)
    engines = [("agent", agent, "agent engine", f"x{cfg.agent.engines}, "), ("user", user, "user-simulator engine", "")]
    for role, shape, name, count in (e for e in engines if e[1] is not None):   # user None: no simulator engine
        tp, on_gpu, takes = getattr(cfg, role).tensor_parallel_size, getattr(cfg.placement, role).gpus > 0, role in trained
        kv = kv_tokens(cfg, shape, tp, device_bytes if on_gpu else None, takes)
        roles.append(RolePlan(name, f"{name} ({count}TP {tp}, KV cache holds {kv:,} tokens)",
                              engine_plan(cfg, shape, tp, device_bytes, on_gpu, takes), on_gpu))
    return roles


# An engine whose KV cache holds fewer calls at their longest serves an iteration's calls nearly one at a
# time (the paper config on a 40 GB A100: 2 calls of 16k tokens beside 27.5 GiB of weights)
MIN_CALLS_IN_KV = 4


def fit_problems(roles: list[RolePlan], cfg: Any, agent: ModelShape, device_bytes: Optional[float]) -> list[str]:
    """One line per GPU role that does not fit the device with FIT_MARGIN, naming it and the shortfall; an
    engine's KV cache must also hold MIN_CALLS_IN_KV calls of max_model_len (vLLM refuses to start below one)."""
    if device_bytes is None:
        return []
    usable = usable_bytes(device_bytes)
    problems = []
    for r in roles:
        if not r.on_gpu:
            continue
        if r.total > usable:
            problems.append(f"{r.role} does not fit: it needs {r.total / GIB:.1f} GiB per GPU, "
                            f"{(r.total - usable) / GIB:.1f} GiB more than the {usable / GIB:.1f} GiB usable of a "
                            f"{device_bytes / GIB:.1f} GiB GPU ({FIT_MARGIN:.0%} margin)")
        kv = next((v for k, v in r.items.items() if k.startswith("KV cache")), None)
        one_call = cfg.engine.max_model_len * kv_bytes_per_token(
            cfg, agent, cfg.agent.tensor_parallel_size if r.role == "agent engine" else cfg.user.tensor_parallel_size)
        if kv is not None and kv < MIN_CALLS_IN_KV * one_call:
            problems.append(f"{r.role}: its KV cache ({kv / GIB:.1f} GiB) holds {int(kv // one_call)} call(s) of "
                            f"engine.max_model_len = {cfg.engine.max_model_len:,} tokens ({one_call / GIB:.1f} GiB "
                            f"each), fewer than {MIN_CALLS_IN_KV}: the iteration's calls would run nearly one at a "
                            "time (a larger GPU, tensor parallelism or a shorter engine.max_model_len)")
    return problems


# DeepSpeed's checkpoint per parameter: the optimizer's fp32 master copy and Adam's m and v (12 bytes) and the
# partitioned model states in the training dtype, beside the HF folder in that dtype
OPTIMIZER_STATE_BYTES = 12


def checkpoint_bytes(cfg: Any, model: ModelShape) -> tuple[float, float]:
    """(HF weights, DeepSpeed state) bytes of one checkpoint of one trained model."""
    weight = DTYPE_BYTES[cfg.models.dtype] * model.params
    return weight, weight + OPTIMIZER_STATE_BYTES * model.params


def format_plan(cfg: Any, agent: ModelShape, user: Optional[ModelShape],
                device_bytes: Optional[float] = None) -> str:
    """The plan as `sead-ray plan` prints it: per role its items and total, then the device's verdict."""
    roles = plan_roles(cfg, agent, user, device_bytes)
    lines = [f"memory plan of {cfg.source} (estimates in GiB; fragmentation: the {FIT_MARGIN:.0%} margin)",
             f"model {agent.name}: {agent.params / 1e9:.2f} B parameters, {cfg.models.dtype}"]
    for r in roles:
        lines += ["", f"{r.title}; per {'GPU' if r.on_gpu else 'CPU worker'}:"]
        lines += [f"  {k:<56}{v / GIB:>9.1f}" for k, v in r.items.items()]
        lines.append(f"  {'total':<56}{r.total / GIB:>9.1f}")
        if r.role == "trainer" and cfg.trainer.offload_optimizer:
            host = offloaded_host_bytes(cfg, agent) / GIB
            lines.append(f"  (CPU memory per rank for the offloaded optimizer: {host:.1f})")
    trained = [agent] + ([user] if cfg.user.train and user is not None else [])
    hf, state = (sum(x) for x in zip(*(checkpoint_bytes(cfg, m) for m in trained)))
    every = f"every {cfg.train.checkpoint_every} iteration(s)" if cfg.train.checkpoint_every else "at the end"
    lines += ["", f"checkpoint ({every}): {(hf + state) / GIB:.1f} GiB (HF weights {hf / GIB:.1f}, DeepSpeed state "
              f"{state / GIB:.1f}), ~{(hf + state) / 300e6 / 60:.0f} min at 300 MB/s (a network filesystem); a stop "
              f"does not write one when the last took over train.stop_save_max_s = {cfg.train.stop_save_max_s:.0f} s", ""]
    if not any(r.on_gpu for r in roles):
        lines.append("no role on a GPU: nothing to check against a device")
    elif device_bytes is None:
        lines.append("GPU memory unknown (no local GPU): set placement.gpu_memory_gib to check the fit")
    else:
        lines.append(f"GPU: {device_bytes / GIB:.1f} GiB, {usable_bytes(device_bytes) / GIB:.1f} usable "
                     f"({FIT_MARGIN:.0%} margin): " + ("every role fits" if not fit_problems(roles, cfg, agent, device_bytes)
                                                      else "does NOT fit"))
    return "\n".join(lines)
