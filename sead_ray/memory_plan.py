"""Memory plan per GPU (or per CPU worker) of a run config, computed from the model's shape (pure).

Trainer ranks hold ZeRO-3 shards of the parameters, gradients and optimizer state, the gathered
parameters of the layers in flight, the activations of one micro-batch (with gradient checkpointing,
the layer inputs plus one layer's recompute) and the logits of the trained positions only. Engines
hold their share of the weights (tensor parallel) and the KV cache: configured, or with
`engine.kv_cache_mb: auto` what `max_num_seqs` calls at their longest need (`auto_kv_cache_mb`).
Estimates: allocator fragmentation, CUDA graphs and communication buffers come on top (a few GiB per
GPU).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class ModelShape:
    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        attention = self.hidden * self.hidden * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_params + embeddings + self.hidden

    @classmethod
    def from_hf_config(cls, path: Path) -> ModelShape:
        c = json.loads(Path(path).read_text())
        return cls(c.get("_name_or_path") or Path(path).parent.name, c["num_hidden_layers"], c["hidden_size"],
                   c["intermediate_size"], c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"]),
                   c["vocab_size"], bool(c.get("tie_word_embeddings", False)))


# Shapes of models a config may name before they are downloaded (config.json of each).
KNOWN_SHAPES = {
    "Qwen2.5-7B-Instruct": ModelShape("Qwen2.5-7B-Instruct", 28, 3584, 18944, 28, 4, 152064),
    "Qwen2.5-14B-Instruct": ModelShape("Qwen2.5-14B-Instruct", 48, 5120, 13824, 40, 8, 152064),
    "Qwen2.5-72B-Instruct": ModelShape("Qwen2.5-72B-Instruct", 80, 8192, 29568, 64, 8, 152064),
}


def model_shape(reference: str, folder: Optional[Path]) -> ModelShape:
    """From the model folder's config.json, else from the known shapes by the reference's last name."""
    if folder is not None and (Path(folder) / "config.json").exists():
        return ModelShape.from_hf_config(Path(folder) / "config.json")
    name = Path(reference).name
    if name in KNOWN_SHAPES:
        return KNOWN_SHAPES[name]
    raise ValueError(f"no config.json for {reference!r} and no known shape for {name!r} "
                     f"(known: {', '.join(KNOWN_SHAPES)})")


def trainer_plan(cfg: Any, m: ModelShape) -> dict[str, float]:
    """Bytes per trainer rank, by item."""
    world, b = cfg.trainer.num_workers, DTYPE_BYTES[cfg.models.dtype]
    zero3 = cfg.trainer.zero_stage == 3
    shard = world if zero3 else 1
    seq, mbs = cfg.train.max_seq_len, cfg.train.micro_batch_size
    master = 4 if b < 4 else 0                       # fp32 master weights next to bf16 ones
    layer_activations = 34 * seq * mbs * m.hidden * b // 2   # Korthikanti et al., flash attention (no s^2 term)
    plan = {
        "parameters (ZeRO-3 shard)" if zero3 else "parameters": m.params * b / shard,
        "gradients (shard)" if zero3 else "gradients": m.params * b / shard,
        "optimizer: Adam m, v (+ fp32 master)": m.params * (8 + master) / (world if cfg.trainer.zero_stage >= 1 else 1),
        "gathered layers in flight (2)": 2 * m.layer_params * b if zero3 else 0,
        "activations (1 micro-batch)": (m.layers * seq * mbs * m.hidden * b + layer_activations
                                        if cfg.train.gradient_checkpointing else m.layers * layer_activations),
        # float32 logits, logsumexp and their gradient over the trained positions (at most the whole call)
        "logits of trained positions": 3 * seq * mbs * m.vocab * 4,
    }
    if cfg.train.kl_coef > 0:
        plan["reference model (shard)"] = m.params * b / shard
    return plan


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


def auto_kv_cache_mb(cfg: Any, m: ModelShape, tensor_parallel: int, prompt_tokens: int,
                     available_bytes: Optional[float] = None, engines: int = 1) -> tuple[int, str]:
    """`engine.kv_cache_mb: auto`: room for `max_num_seqs` calls at their longest (no prefix shared), at
    most AUTO_KV_SHARE of `available_bytes` split among `engines` (CPU; None: no cap). Returns the MB and
    how they were chosen, for the log."""
    per_call = call_tokens(cfg, prompt_tokens)
    need = cfg.engine.max_num_seqs * per_call * kv_bytes_per_token(cfg, m, tensor_parallel)
    why = f"{cfg.engine.max_num_seqs} calls x {per_call:,} tokens"
    if available_bytes is not None and available_bytes * AUTO_KV_SHARE / engines < need:
        need = available_bytes * AUTO_KV_SHARE / engines
        why += (f" capped at {AUTO_KV_SHARE:.0%} of the {available_bytes / GIB:.1f} GiB available, "
                f"over {engines} engine(s)")
    return max(16, int(need / 2**20)), why


def kv_cache_bytes(cfg: Any, m: ModelShape, tensor_parallel: int) -> float:
    """The configured KV cache; for `auto`, the calls' budget with a system prompt of 1,024 tokens."""
    if cfg.engine.kv_cache_mb == "auto":
        return auto_kv_cache_mb(cfg, m, tensor_parallel, prompt_tokens=1024)[0] * 2**20
    return cfg.engine.kv_cache_mb * 2**20


def engine_plan(cfg: Any, m: ModelShape, tensor_parallel: int) -> dict[str, float]:
    b = DTYPE_BYTES[cfg.models.dtype]
    return {"weights (tensor-parallel share)": m.params * b / tensor_parallel,
            f"KV cache (engine.kv_cache_mb: {cfg.engine.kv_cache_mb})": kv_cache_bytes(cfg, m, tensor_parallel)}


def kv_tokens(cfg: Any, m: ModelShape, tensor_parallel: int) -> int:
    """Tokens the KV cache holds."""
    return int(kv_cache_bytes(cfg, m, tensor_parallel) / kv_bytes_per_token(cfg, m, tensor_parallel))


def format_plan(cfg: Any, agent: ModelShape, user: Optional[ModelShape]) -> str:
    unit = "GPU" if cfg.placement.trainer.gpus > 0 else "CPU worker"
    roles = [(f"trainer: {cfg.trainer.num_workers} ZeRO-{cfg.trainer.zero_stage} ranks, micro-batch "
              f"{cfg.train.micro_batch_size} x {cfg.train.max_seq_len} tokens, gradient checkpointing "
              f"{'on' if cfg.train.gradient_checkpointing else 'off'}", trainer_plan(cfg, agent)),
             (f"agent engine (x{cfg.agent.engines}, TP {cfg.agent.tensor_parallel_size}, KV cache holds "
              f"{kv_tokens(cfg, agent, cfg.agent.tensor_parallel_size):,} tokens)",
              engine_plan(cfg, agent, cfg.agent.tensor_parallel_size))]
    if user is not None:
        roles.append((f"user-simulator engine (TP {cfg.user_sim.tensor_parallel_size}, KV cache holds "
                      f"{kv_tokens(cfg, user, cfg.user_sim.tensor_parallel_size):,} tokens)",
                      engine_plan(cfg, user, cfg.user_sim.tensor_parallel_size)))
    lines = [f"memory plan of {cfg.source} (estimates in GiB; allocator, CUDA graphs and buffers come on top)",
             f"model {agent.name}: {agent.params / 1e9:.2f} B parameters, {cfg.models.dtype}"]
    for title, items in roles:
        lines += ["", f"{title}; per {unit}:"]
        lines += [f"  {k:<42}{v / GIB:>9.1f}" for k, v in items.items()]
        lines.append(f"  {'total':<42}{sum(items.values()) / GIB:>9.1f}")
    return "\n".join(lines)
