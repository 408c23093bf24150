"""GRPO without a critic: rewards, advantages and the token-level clipped policy loss (pure torch).

Advantage modes:
- `batch_mean` (paper):      A_i = R_i - mean_j R_j over the whole batch.
- `group_mean`:              A_i = R_i - mean of R over the rollouts of the same profile.
- `group_norm` (ref. code):  (R_i - group mean) / (group std + eps).
Every agent token of a trajectory gets its trajectory's advantage; all other tokens are masked out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

ADVANTAGE_MODES = ("batch_mean", "group_mean", "group_norm")


def trajectory_reward(success: bool, agent_parse_failures: int, success_reward: float = 1.0,
                      format_penalty: float = 0.0) -> float:
    """R = success_reward on success else 0, minus format_penalty per agent turn that did not parse."""
    return (success_reward if success else 0.0) - format_penalty * agent_parse_failures


def compute_advantages(rewards: Sequence[float], groups: Sequence[int], mode: str = "batch_mean",
                       eps: float = 1e-6) -> list[float]:
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group ids")
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"unknown advantage mode {mode!r} (one of {ADVANTAGE_MODES})")
    r = torch.tensor(list(rewards), dtype=torch.float64)
    if len(r) == 0:
        return []
    if mode == "batch_mean":
        return (r - r.mean()).tolist()
    g = torch.tensor(list(groups))
    out = torch.zeros_like(r)
    for gid in g.unique():
        idx = g == gid
        centred = r[idx] - r[idx].mean()
        if mode == "group_norm":
            # Population std of the group; a group with equal rewards has zero advantage.
            centred = centred / (r[idx].std(unbiased=False) + eps)
        out[idx] = centred
    return out.tolist()


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[t+1] | ids[..t]) for t = 0..L-2: shape [B, L-1]."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


@dataclass
class LossStats:
    loss: float
    pg_loss: float
    kl: float
    entropy: float
    clip_fraction: float
    ratio_mean: float
    tokens: int


def policy_loss(
    logprobs: torch.Tensor,          # [B, T] current policy, targets aligned with loss_mask
    old_logprobs: torch.Tensor,      # [B, T] from the rollout (or the trainer before the update)
    advantages: torch.Tensor,        # [B]
    loss_mask: torch.Tensor,         # [B, T] 1 on agent-generated tokens only
    clip_eps: float = 0.2,
    ref_logprobs: Optional[torch.Tensor] = None,
    kl_coef: float = 0.0,
    entropy: Optional[torch.Tensor] = None,
    entropy_coef: float = 0.0,
    normalizer: Optional[float] = None,
) -> tuple[torch.Tensor, LossStats]:
    """PPO-clip surrogate averaged over all agent tokens (token-level aggregation), plus `kl_coef` x the
    low-variance KL estimator k3 to a reference model, minus `entropy_coef` x entropy.

    `normalizer`: divide token sums by this instead of this micro-batch's token count, so that
    micro-batches and ranks add up to the mean over the whole batch. Stats are always per-token means."""
    mask = loss_mask.to(logprobs.dtype)

    def reduce(x: torch.Tensor) -> torch.Tensor:
        return (x * mask).sum() / normalizer if normalizer else masked_mean(x, mask)

    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    ratio = torch.exp(logprobs - old_logprobs)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    loss = -reduce(surrogate)
    kl_tokens = None
    if ref_logprobs is not None and kl_coef > 0:
        log_ratio = ref_logprobs - logprobs
        kl_tokens = torch.exp(log_ratio) - log_ratio - 1
        loss = loss + kl_coef * reduce(kl_tokens)
    if entropy is not None and entropy_coef > 0:
        loss = loss - entropy_coef * reduce(entropy)
    with torch.no_grad():
        clipped = ((ratio - 1).abs() > clip_eps).to(mask.dtype)
        stats = LossStats(
            float(loss), float(-masked_mean(surrogate, mask)),
            float(masked_mean(kl_tokens, mask)) if kl_tokens is not None else 0.0,
            float(masked_mean(entropy, mask)) if entropy is not None else 0.0,
            float(masked_mean(clipped, mask)), float(masked_mean(ratio, mask)), int(mask.sum()))
    return loss, stats


@dataclass
class TrainBatch:
    """Padded tensors of a list of trajectories; per-token fields are aligned with targets (L-1)."""
    input_ids: torch.Tensor       # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    loss_mask: torch.Tensor       # [B, L-1]
    old_logprobs: torch.Tensor    # [B, L-1]
    advantages: torch.Tensor      # [B]


def collate(token_ids: Sequence[Sequence[int]], loss_masks: Sequence[Sequence[int]],
            rollout_logprobs: Sequence[Sequence[float]], advantages: Sequence[float],
            pad_id: int, max_len: Optional[int] = None) -> TrainBatch:
    """Right-pad to the longest sequence (truncated at max_len; truncated tokens leave the loss)."""
    n = len(token_ids)
    if not (n == len(loss_masks) == len(rollout_logprobs) == len(advantages)):
        raise ValueError("token_ids, loss_masks, rollout_logprobs and advantages differ in length")
    for i in range(n):
        if not len(token_ids[i]) == len(loss_masks[i]) == len(rollout_logprobs[i]):
            raise ValueError(f"trajectory {i}: ids, mask and logprobs differ in length")
    L = max((len(t) for t in token_ids), default=1)
    if max_len is not None:
        L = min(L, max_len)
    ids = torch.full((n, L), pad_id, dtype=torch.long)
    attn = torch.zeros((n, L), dtype=torch.long)
    mask = torch.zeros((n, L), dtype=torch.float32)
    old = torch.zeros((n, L), dtype=torch.float32)
    for i in range(n):
        k = min(len(token_ids[i]), L)
        ids[i, :k] = torch.tensor(token_ids[i][:k])
        attn[i, :k] = 1
        mask[i, :k] = torch.tensor(loss_masks[i][:k], dtype=torch.float32)
        old[i, :k] = torch.tensor(rollout_logprobs[i][:k], dtype=torch.float32)
    # Target t+1 is predicted at position t: drop the first position of per-token fields.
    return TrainBatch(ids, attn, mask[:, 1:], old[:, 1:], torch.tensor(list(advantages), dtype=torch.float32))
