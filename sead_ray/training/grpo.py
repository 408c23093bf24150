"""GRPO without a critic: advantages and the token-level clipped policy loss (pure torch). The rewards
they start from are sead_ray.training.rewards'.

Advantage estimators (`train.advantage_mode`, the registry ADVANTAGE_ESTIMATORS):
- `batch_mean` (paper):      A_i = R_i - mean_j R_j over the whole batch.
- `group_mean`:              A_i = R_i - mean of R over the rollouts of the same profile.
- `group_norm` (ref. code):  (R_i - group mean) / (group std + eps).
Every agent token of a trajectory gets its trajectory's advantage; all other tokens are masked out.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from sead_ray.core.registry import Registry
from sead_ray.training.shared_prefix import PrefixKV, batch_shared_len, prefix_forward, suffix_forward
from sead_ray.training.trainer_protocol import ENTROPY_CHUNK_POSITIONS, RankStepResult, Sample, TrainerSettings

# An estimator maps the batch's rewards [N] and group ids [N] to advantages [N].
AdvantageEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("train.advantage_mode", "advantage estimator")


@ADVANTAGE_ESTIMATORS.register("batch_mean")
def batch_mean_advantages(r: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    return r - r.mean()


def _per_group(r: torch.Tensor, groups: torch.Tensor, scale: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    out = torch.zeros_like(r)
    for gid in groups.unique():
        idx = groups == gid
        out[idx] = scale(r[idx] - r[idx].mean())
    return out


@ADVANTAGE_ESTIMATORS.register("group_mean")
def group_mean_advantages(r: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    return _per_group(r, groups, lambda centred: centred)


@ADVANTAGE_ESTIMATORS.register("group_norm")
def group_norm_advantages(r: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # population std of the group; a group with equal rewards has zero advantage
    return _per_group(r, groups, lambda centred: centred / (centred.std(unbiased=False) + eps))


def compute_advantages(rewards: Sequence[float], groups: Sequence[int], mode: str = "batch_mean") -> list[float]:
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group ids")
    estimator = ADVANTAGE_ESTIMATORS.get(mode)
    if not rewards:
        return []
    return estimator(torch.tensor(list(rewards), dtype=torch.float64), torch.tensor(list(groups))).tolist()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


@dataclass
class LossStats:
    """Per-token means over this micro-batch's agent tokens (whatever `normalizer` the loss used)."""
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
        pg = float(-masked_mean(surrogate, mask))
        kl = float(masked_mean(kl_tokens, mask)) if kl_tokens is not None else 0.0
        ent = float(masked_mean(entropy, mask)) if entropy is not None else 0.0
        per_token_loss = pg + (kl_coef * kl if kl_tokens is not None else 0.0) - \
            (entropy_coef * ent if entropy is not None and entropy_coef > 0 else 0.0)
        stats = LossStats(per_token_loss, pg, kl, ent, float(masked_mean(clipped, mask)), float(masked_mean(ratio, mask)),
                          int(mask.sum()))
    return loss, stats


@dataclass
class TrainBatch:
    """Padded tensors of a list of trajectories; per-token fields are aligned with targets (L-1)."""
    input_ids: torch.Tensor       # [B, L]
    attention_mask: torch.Tensor  # [B, L]
    loss_mask: torch.Tensor       # [B, L-1]
    old_logprobs: torch.Tensor    # [B, L-1]
    advantages: torch.Tensor      # [B]
    shared_len: int = 0           # leading tokens every row shares, untrained (the shared-prefix path; 0: off)


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


def forward_logprobs(model: Any, batch: TrainBatch, device: Any = "cpu", with_entropy: bool = False,
                     entropy_grad: bool = False, temperature: float = 1.0, past: Optional[PrefixKV] = None
                     ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Per-target logprobs [B, L-1] (and entropies) of a collated batch under a causal LM.

    Logits are computed only at the positions some row of the batch trains on (`logits_to_keep` as
    indices): the shared system prompt and the simulator's turns are context, and a full-vocabulary
    head over them would dominate the cost. Logprobs are logit(target) - logsumexp: unlike log_softmax,
    no second full-vocabulary tensor is kept for backward. The entropy joins the autograd graph only
    when trained on (`entropy_grad`). `temperature` is the rollouts' sampling temperature: the policy
    being optimised is the one that sampled (logits / T), as the engines report it (vLLM's processed
    logprobs).

    With `past` (the keys and values of the batch's shared root, sead_ray.training.shared_prefix), the tokens
    every row shares beyond it (`batch.shared_len`) are computed once, then each row's own suffix."""
    ids = batch.input_ids.to(device)
    B, L = ids.shape
    # position t predicts target t + 1; loss_mask is already indexed by t (L - 1 columns)
    trained = batch.loss_mask.sum(0).nonzero().squeeze(-1)
    if len(trained) == 0:   # a padding micro-batch: one position keeps the graph (a collective) alive
        trained = torch.tensor([L - 2])
    trained = trained.to(device)
    if past is None:
        out = model(input_ids=ids, attention_mask=batch.attention_mask.to(device), logits_to_keep=trained)
    else:
        start = batch.shared_len
        if not past.length < start <= int(trained.min()):
            raise ValueError(f"shared prefix of {start} tokens (root {past.length}) overlaps a trained position "
                             f"({int(trained.min())})")
        prefix = prefix_forward(model, ids[:1, past.length:start], past)
        out = suffix_forward(model, ids[:, start:], prefix, trained - start)
    logits = out.logits.float()                                           # [B, trained positions, vocab]
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    part = logits.gather(-1, ids[:, trained + 1].unsqueeze(-1)).squeeze(-1) - lse
    logprobs = torch.zeros((B, L - 1), dtype=part.dtype, device=part.device)
    logprobs[:, trained] = part
    entropy = None
    if with_entropy and entropy_grad and torch.is_grad_enabled():
        entropy = torch.zeros_like(logprobs)
        entropy[:, trained] = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    elif with_entropy:
        # only reported: no graph, and a softmax of ENTROPY_CHUNK_POSITIONS positions at a time instead of
        # two more full-vocabulary tensors of the whole call (sead_ray.ops.memory_plan counts the chunk)
        entropy = torch.zeros_like(logprobs)
        with torch.no_grad():
            for i in range(0, logits.shape[1], ENTROPY_CHUNK_POSITIONS):
                part_logits = logits[:, i:i + ENTROPY_CHUNK_POSITIONS]
                probs = torch.softmax(part_logits, dim=-1)
                entropy[:, trained[i:i + ENTROPY_CHUNK_POSITIONS]] = (
                    lse[:, i:i + ENTROPY_CHUNK_POSITIONS] - (probs * part_logits).sum(-1)).detach()
    return logprobs, entropy


@dataclass
class ModelForward:
    """How the update reads one model (the policy, or the reference): logprobs of a micro-batch, after a shared
    past if one is given, and the keys and values of a shared root."""
    model: Any
    device: Any = "cpu"
    temperature: float = 1.0
    entropy_grad: bool = False

    def logprobs(self, batch: TrainBatch, with_entropy: bool, past: Optional[PrefixKV] = None
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        return forward_logprobs(self.model, batch, self.device, with_entropy, entropy_grad=self.entropy_grad,
                                temperature=self.temperature, past=past)

    def prefix(self, ids: Sequence[int]) -> PrefixKV:
        return prefix_forward(self.model, torch.tensor([list(ids)], device=self.device))


def gradient_norm(parameters: Any) -> float:
    """The L2 norm of all gradients together (what DeepSpeed's ZeRO optimizers report before clipping;
    at ZeRO-0 DeepSpeed computes it to clip and drops it, so the trainer asks here)."""
    norms = [p.grad.detach().float().norm() for p in parameters if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def micro_batches(samples: Sequence[Sample], micro_batch_size: int, pad_id: int, max_len: Optional[int] = None,
                  pad_to: Optional[int] = None, root: Sequence[int] = ()) -> list[TrainBatch]:
    """Collated micro-batches, padded to `pad_to` with empty-mask samples: every rank must run the same
    number of forward passes (under ZeRO-3 they are collectives).

    With a shared `root` (every sample starts with it; sead_ray.training.shared_prefix.shared_root), the samples are
    formed along the prefix tree: sorted by their tokens, so that calls sharing more than the root (a group's
    opening, its scripted turns) share a micro-batch, and each batch records how many leading tokens its rows
    share; a padding sample is the root and three pads."""
    if root:
        samples = sorted(samples, key=lambda s: s.token_ids)
    chunks = [list(samples[i:i + micro_batch_size]) for i in range(0, len(samples), micro_batch_size)]
    if pad_to is not None:
        if len(chunks) > pad_to:
            raise ValueError(f"{len(chunks)} micro-batches, more than the {pad_to} configured")
        padding = [*root, pad_id, pad_id, pad_id] if root else [pad_id, pad_id]
        chunks += [[Sample(padding, [0] * len(padding), [0.0] * len(padding), 0.0)]] * (pad_to - len(chunks))
    batches = []
    for c in chunks:
        batch = collate([s.token_ids for s in c], [s.loss_mask for s in c], [s.rollout_logprobs for s in c],
                        [s.advantage for s in c], pad_id=pad_id, max_len=max_len)
        if root:
            batch.shared_len = batch_shared_len([s.token_ids[:max_len] for s in c], [s.loss_mask[:max_len] for s in c],
                                                len(root))
        batches.append(batch)
    return batches


def grpo_update(policy: ModelForward, backward_and_step: Callable[[torch.Tensor], None], batches: Sequence[TrainBatch],
                settings: TrainerSettings, *, rank: int, world_size: int, global_tokens: int,
                reference: Optional[ModelForward] = None, root: Sequence[int] = ()) -> RankStepResult:
    """One rank's GRPO update over its micro-batches (`settings.ppo_epochs` passes).

    The loss of a micro-batch is its token sum over all agent tokens of the global batch, times
    world x accumulation steps: DeepSpeed averages gradients over ranks and scales each micro-batch by
    1/accumulation steps, so the applied gradient is that of the exact token-level mean of the batch.

    With a shared `root` (the batches of `micro_batches(..., root=root)`), its keys and values are computed once per
    pass: all micro-batches but the last read detached copies, the last reads the root itself, and the root's
    backward runs once with every micro-batch's gradient (sead_ray.training.shared_prefix.PrefixKV)."""
    device = policy.device
    normalizer = max(1, global_tokens) / (world_size * settings.grad_accum_steps)

    def logprobs_of(forward: ModelForward) -> list[torch.Tensor]:
        past = forward.prefix(root) if root else None
        return [forward.logprobs(b, False, past)[0] for b in batches]
    # Old logprobs: with one epoch the policy that sampled is the one being updated, so the current
    # forward pass detached is exact; with more epochs they are recomputed once before updating.
    old = refs = None
    with torch.no_grad():
        if settings.ppo_epochs > 1:
            old = logprobs_of(policy)
        if reference is not None:
            refs = logprobs_of(reference)
    result = RankStepResult(rank, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                            seq_tokens=int(sum(int(b.attention_mask.sum()) for b in batches)))
    for epoch in range(settings.ppo_epochs):
        shared = policy.prefix(root) if root else None
        for i, b in enumerate(batches):
            past = None
            if shared is not None:
                past = shared.joined() if i == len(batches) - 1 else shared.leaves()
            logprobs, entropy = policy.logprobs(b, True, past)
            mask = b.loss_mask.to(device)
            old_lp = old[i] if old is not None else logprobs.detach()
            loss, s = policy_loss(logprobs, old_lp, b.advantages.to(device), mask, settings.clip_eps,
                                  ref_logprobs=refs[i] if refs is not None else None, kl_coef=settings.kl_coef,
                                  entropy=entropy, entropy_coef=settings.entropy_coef, normalizer=normalizer)
            backward_and_step(loss)
            if shared is not None:
                shared.collect_leaf_grads()
            if epoch == 0:   # figures of the policy that sampled, incl. rollout (vLLM) vs trainer logprobs
                diff = (logprobs.detach() - b.old_logprobs.to(device)).abs() * mask
                result.mismatch_sum += float(diff.sum())
                result.mismatch_max = max(result.mismatch_max, float(diff.max()) if mask.any() else 0.0)
                result.tokens += s.tokens
                result.loss_sum += s.loss * s.tokens
                result.pg_loss_sum += s.pg_loss * s.tokens
                result.kl_sum += s.kl * s.tokens
                result.entropy_sum += s.entropy * s.tokens
                result.clipped_tokens += s.clip_fraction * s.tokens
    return result
