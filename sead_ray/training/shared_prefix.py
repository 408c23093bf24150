"""Each shared prefix computed once: the keys and values of the tokens that calls of a step share (the agent's system
prompt in every call; within a micro-batch, a group's opening and scripted turns) are computed once, with gradients,
and every call continues from them (pure torch + transformers; exact to the per-call forward and backward).

The step's calls form a two-level prefix tree (`shared_root`, `batch_shared_len`):
- the root, shared by every call of the batch, is computed once per step (`prefix_forward`) and its keys and values
  are the past of every micro-batch. Micro-batches are separate backward passes (gradient accumulation), so all but
  the last continue from detached copies of the root (`PrefixKV.leaves`), whose gradients accumulate; the last one
  continues from the root itself with those gradients added where they enter it (`PrefixKV.joined`): the root's own
  backward runs once, in the step's last backward, with the sum of every call's gradient.
- within a micro-batch (its calls sorted so that calls sharing more are neighbours), the tokens all its rows share
  beyond the root are computed once more, then each row's own suffix.

Mechanism: the past reaches each attention layer as a forward keyword (`sead_prefix`, passed down by transformers
to the attention function) rather than as a KV cache, because transformers drops the cache under gradient
checkpointing (a layer's recompute in backward would write it twice); a keyword is replayed as it was. The attention
function (registered as ATTENTION_NAME) prepends the past to the layer's keys and values and masks causally with the
past in full; without the keyword it is transformers' SDPA, unchanged. Only decoder models whose layers call the
attention interface with full (not sliding-window) attention are supported: `unsupported_reason` says why not.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

ATTENTION_NAME = "sead_shared_prefix"
# decoder-only families whose attention layers take (module, q, k, v, mask, **kwargs) through transformers' attention
# interface with full causal attention and rotary positions from `position_ids` (checked on transformers 5.19)
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
PAST_KWARG = "sead_prefix"


@dataclass
class PrefixKV:
    """The keys and values of a prefix, per layer `[rows (1), kv_heads, tokens, head_dim]`, in rotary positions
    0..length-1."""
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    length: int
    _accumulated: Optional[list[torch.Tensor]] = field(default=None, repr=False)
    _leaves: Optional[list[tuple[torch.Tensor, torch.Tensor]]] = field(default=None, repr=False)

    def extend(self, other: PrefixKV) -> PrefixKV:
        """This prefix followed by `other` (whose positions continue this one's)."""
        return PrefixKV([(torch.cat([k, k2], dim=2), torch.cat([v, v2], dim=2))
                         for (k, v), (k2, v2) in zip(self.layers, other.layers)], self.length + other.length)

    def leaves(self) -> PrefixKV:
        """Detached copies whose gradients accumulate over the backward passes that read them (all micro-batches but
        the last); the same copies each call."""
        if self._leaves is None:
            self._leaves = [(k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
                            for k, v in self.layers]
        return PrefixKV(self._leaves, self.length)

    def collect_leaf_grads(self) -> None:
        """Move the leaves' gradients of the backward just run into an fp32 sum (bf16 gradients of many micro-batches
        summed in bf16 would lose what the per-call path keeps)."""
        if self._leaves is None:
            return
        flat = [t for pair in self._leaves for t in pair]
        if self._accumulated is None:
            self._accumulated = [torch.zeros_like(t, dtype=torch.float32) for t in flat]
        for acc, t in zip(self._accumulated, flat):
            if t.grad is not None:
                acc += t.grad.float()
                t.grad = None

    def joined(self) -> PrefixKV:
        """Itself, with the leaves' accumulated gradients added where the gradient of the next backward enters it:
        that backward carries every micro-batch's share of the prefix through its graph once."""
        self.collect_leaf_grads()
        if self._accumulated is not None:
            flat = [t for pair in self.layers for t in pair]
            for t, acc in zip(flat, self._accumulated):
                if t.requires_grad:
                    t.register_hook(lambda g, acc=acc: g + acc.to(g.dtype))
            self._accumulated = None
        return self


@dataclass
class _PastPass:
    """What one forward hands to every attention layer: the past to prepend (or none) and where to put each layer's
    own keys and values (a prefix forward keeps them)."""
    past: Optional[PrefixKV]
    rows: int
    captured: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


def _attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: Optional[torch.Tensor], **kwargs: Any) -> tuple[torch.Tensor, Any]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    state: Optional[_PastPass] = kwargs.pop(PAST_KWARG, None)
    if state is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if kwargs.get("sliding_window") is not None:
        raise ValueError(f"{type(module).__name__}: sliding-window attention is not supported by the shared prefix")
    state.captured[module.layer_idx] = (key, value)   # a gradient-checkpointing replay writes the same again
    past_len = 0
    if state.past is not None:
        past_k, past_v = state.past.layers[module.layer_idx]
        past_len = past_k.shape[2]
        key = torch.cat([past_k.expand(state.rows, -1, -1, -1), key], dim=2)
        value = torch.cat([past_v.expand(state.rows, -1, -1, -1), value], dim=2)
    # query i (position past_len + i) sees the whole past and its own row up to itself; right padding needs no
    # more (a real token never follows a pad), and a pad's output is never trained on
    q_len = query.shape[2]
    allowed = torch.ones(q_len, past_len + q_len, dtype=torch.bool, device=query.device).tril(diagonal=past_len)
    return sdpa_attention_forward(module, query, key, value, allowed[None, None], is_causal=False, **kwargs)


def unsupported_reason(model: Any) -> Optional[str]:
    """None if `model` can take the shared-prefix path, else why not (one line)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model type {model_type!r} is not one of {', '.join(SUPPORTED_MODEL_TYPES)}"
    if getattr(config, "use_sliding_window", False) or any(t != "full_attention"
                                                            for t in getattr(config, "layer_types", None) or ()):
        return "the model uses sliding-window attention"
    if getattr(config, "attention_dropout", 0.0):
        return "the model trains with attention dropout (the prefix would see other dropout masks than each call)"
    return None


def install(model: Any) -> None:
    """Route `model`'s attention through the shared-prefix function (SDPA whenever no past is passed)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(ATTENTION_NAME, _attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)
    model.config._attn_implementation = ATTENTION_NAME


def prefix_forward(model: Any, ids: torch.Tensor, past: Optional[PrefixKV] = None) -> PrefixKV:
    """The keys and values of `ids` ([1, n]) after `past` (with gradients when enabled); the past's followed by
    these. Logits of one position only: nothing of a prefix is trained on."""
    n = ids.shape[1]
    start = past.length if past is not None else 0
    state = _PastPass(past, rows=1)
    model(input_ids=ids, position_ids=torch.arange(start, start + n, device=ids.device)[None],
          logits_to_keep=1, use_cache=False, **{PAST_KWARG: state})
    own = PrefixKV([state.captured[i] for i in range(len(state.captured))], n)
    return past.extend(own) if past is not None else own


def suffix_forward(model: Any, ids: torch.Tensor, past: PrefixKV, logits_to_keep: torch.Tensor) -> Any:
    """The model's output over the rows `ids` ([B, n]) continuing `past` (each row's tokens at positions
    past.length...), logits at the indices `logits_to_keep` (relative to `ids`)."""
    rows, n = ids.shape
    state = _PastPass(past, rows=rows)
    return model(input_ids=ids, position_ids=torch.arange(past.length, past.length + n, device=ids.device)[None],
                 logits_to_keep=logits_to_keep, use_cache=False, **{PAST_KWARG: state})


# --------------------------------------------------------------------------- the tree's shape (pure lists)

def trainable_prefix_len(token_ids: Sequence[int], loss_mask: Sequence[int]) -> int:
    """How many leading tokens of a call a prefix may cover: none of them, nor the token after them, trained on
    (position t predicts token t + 1), and at least one position left to predict the last token."""
    first_trained = next((i for i, m in enumerate(loss_mask) if m), len(token_ids))
    return max(0, min(first_trained - 1, len(token_ids) - 2))


def common_prefix_len(rows: Sequence[Sequence[int]]) -> int:
    if not rows:
        return 0
    n = min(len(r) for r in rows)
    first = rows[0]
    for i in range(n):
        if any(r[i] != first[i] for r in rows[1:]):
            return i
    return n


def shared_root(rows: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], max_len: int) -> list[int]:
    """The tokens every call of a batch shares and none trains on, less the last one (each micro-batch computes at
    least one token of its own prefix, so every rank runs the same forwards under ZeRO-3); [] when there is
    nothing to share."""
    if not rows:
        return []
    cap = min(min(trainable_prefix_len(r, m) for r, m in zip(rows, loss_masks)), max_len - 2)
    n = min(common_prefix_len(rows), cap) - 1
    return list(rows[0][:n]) if n >= 1 else []


def batch_shared_len(rows: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]], root_len: int) -> int:
    """The tokens all rows of a micro-batch share (root included), at least one past the root."""
    cap = min(trainable_prefix_len(r, m) for r, m in zip(rows, loss_masks))
    return max(root_len + 1, min(common_prefix_len(rows), cap))
