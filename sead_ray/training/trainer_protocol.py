"""What crosses between the loop and the training ranks: settings, requests, per-rank results, and the
one function that turns per-rank results into the step's figures (pure; no Ray, no DeepSpeed).

Per-rank results carry token *sums*; means are taken once, over the whole batch, in `aggregate_step`.
(Averaging per-rank means, or summing micro-batch losses scaled for DeepSpeed's gradient averaging,
gives figures off by the accumulation steps or the ranks' token shares.)
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from sead_ray.core.roles import ROLES


class TrainerError(RuntimeError):
    """A training rank failed (the message carries its traceback) or stopped answering."""


class WeightSyncFailed(RuntimeError):
    """A weight sync failed on its way to the engines (one died, a transfer timed out, an engine received other
    weights than were sent) after every rank finished its part: the trainer goes on, and the sync can be redone
    to a changed list of engines."""


@dataclass
class Sample:
    """One trajectory as the trainer needs it."""
    token_ids: list[int]
    loss_mask: list[float]      # 0: context; else the token's weight in the loss (1 but for the SOP rehearsal)
    rollout_logprobs: list[float]
    advantage: float


@dataclass
class TrainerSettings:
    """Everything a training rank needs to build its engine and run GRPO steps."""
    model_path: str
    seed: int
    dtype: str
    lr: float
    zero_stage: int
    micro_batch_size: int
    grad_accum_steps: int
    grad_clip: float
    clip_eps: float
    kl_coef: float
    entropy_coef: float
    ppo_epochs: int
    max_seq_len: int
    gradient_checkpointing: bool
    temperature: float = 1.0     # the agent's sampling temperature in training rollouts
    threads: int = 0             # torch threads per rank; 0 = Ray's default (the bundle's whole CPUs, at least 1)
    offload_optimizer: bool = False   # ZeRO-Offload: optimizer states and gradient shards in CPU memory
    shared_prefix: str = "off"   # trainer.shared_prefix: auto computes a step's shared prefix once (training.shared_prefix)
    # the KL's reference model at start (kl_coef > 0); None: none yet (with the SOP rehearsal, the rehearsed agent
    # becomes the reference once it exists: ReferenceRequest)
    reference_path: Optional[str] = None

    @classmethod
    def from_config(cls, cfg: Any, model_path: str, role: str = "agent") -> TrainerSettings:
        """The agent's trainer, or (role `user`, user.train) the simulator's: same optimisation, its own
        model and sampling temperature. The KL's reference is the model self-play starts from: this one, or after the
        SOP rehearsal the rehearsed agent (as RLHF's is the fine-tuned model, not the base it was tuned from)."""
        t = cfg.train
        return cls(model_path=model_path, seed=cfg.seed, dtype=cfg.models.dtype, lr=t.lr,
                   zero_stage=cfg.trainer.zero_stage, micro_batch_size=t.micro_batch_size,
                   # the simulator trains on each of its turns: up to max_turns samples per call
                   grad_accum_steps=grad_accum_steps(t.batch_size * t.rollouts_per_profile
                                                     * (cfg.dialogue.max_turns if ROLES[role].trains_per_turn else 1),
                                                     cfg.trainer.num_workers, t.micro_batch_size),
                   grad_clip=t.grad_clip, clip_eps=t.clip_eps, kl_coef=t.kl_coef, entropy_coef=t.entropy_coef,
                   ppo_epochs=t.ppo_epochs, max_seq_len=t.max_seq_len, gradient_checkpointing=t.gradient_checkpointing,
                   temperature=ROLES[role].sampling(cfg).temperature,
                   threads=cfg.trainer.threads_per_worker, offload_optimizer=cfg.trainer.offload_optimizer,
                   shared_prefix=cfg.trainer.shared_prefix,
                   reference_path=model_path if t.kl_coef > 0 and not rehearses(cfg, role) else None)


def rehearses(cfg: Any, role: str = "agent") -> bool:
    """Whether `role`'s self-play starts from the SOP rehearsal (train.warm_start; the agent's only)."""
    return role == "agent" and cfg.train.warm_start != "none"


# DeepSpeed's buffers, bounded (in elements; its defaults are sized for throughput, not for a GPU that the
# optimizer state nearly fills): the gradient reduce bucket (default 5e8: 1 GB in bf16, allocated up front),
# the parameters kept gathered (default 1e9: 2 GB) and the optimizer's sub-group, whose fp32 gradient copy
# and Adam temporaries exist at once during the step (default 1e9: 4 GB each). sead_ray.ops.memory_plan counts
# these same numbers.
REDUCE_BUCKET_ELEMENTS = 50_000_000
PREFETCH_BUCKET_ELEMENTS = 50_000_000
MAX_LIVE_PARAMETERS = 300_000_000
SUB_GROUP_ELEMENTS = 100_000_000
# With entropy_coef = 0 the entropy is only reported: computed without grad over this many trained
# positions at a time, so no second full-vocabulary tensor of the whole call exists (grpo.forward_logprobs).
ENTROPY_CHUNK_POSITIONS = 256
# The trainer ranks' CUDA allocator: segments that grow in place instead of new blocks of odd sizes, so the
# varying lengths of calls do not fragment the memory the plan counts.
CUDA_ALLOC_CONF = "expandable_segments:True"


def deepspeed_config(s: TrainerSettings, world_size: int) -> dict:
    """The DeepSpeed config of a training rank."""
    zero = {"stage": s.zero_stage, "stage3_param_persistence_threshold": 0,
            "stage3_gather_16bit_weights_on_model_save": False,
            "reduce_bucket_size": REDUCE_BUCKET_ELEMENTS, "allgather_bucket_size": REDUCE_BUCKET_ELEMENTS,
            "stage3_prefetch_bucket_size": PREFETCH_BUCKET_ELEMENTS,
            "stage3_max_live_parameters": MAX_LIVE_PARAMETERS, "stage3_max_reuse_distance": MAX_LIVE_PARAMETERS,
            "sub_group_size": SUB_GROUP_ELEMENTS}
    if s.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": s.micro_batch_size,
        "gradient_accumulation_steps": s.grad_accum_steps,
        "train_batch_size": s.micro_batch_size * s.grad_accum_steps * world_size,
        "gradient_clipping": s.grad_clip,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,   # a plain torch AdamW: no JIT-built CPU Adam needed
        # ... also when offloaded (DeepSpeed would insist on its CPU Adam, a JIT-built op): torch's AdamW
        # steps the CPU shards, slower than DeepSpeedCPUAdam but with nothing to compile on the nodes
        "zero_force_ds_cpu_optimizer": False,
        "bf16": {"enabled": s.dtype == "bfloat16"},
        "fp16": {"enabled": s.dtype == "float16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def grad_accum_steps(batch: int, world_size: int, micro_batch_size: int) -> int:
    """Micro-batches per rank so that one optimizer step covers the whole batch."""
    return max(1, math.ceil(math.ceil(batch / world_size) / micro_batch_size))


# --------------------------------------------------------------------------- requests (one per command)

@dataclass
class StepRequest:
    """One GRPO update; each rank also receives its shard of samples."""
    global_tokens: int            # agent tokens of the whole batch: the loss is their mean
    lr: Optional[float] = None    # this step's learning rate (the warm start has its own); None: the configured
    reset_optimizer_after: bool = False   # the warm start's last step: its Adam moments are not self-play's
    # the tokens every call of the batch shares (training.shared_prefix.shared_root), computed once per pass by every
    # rank that can (trainer.shared_prefix); () : every call in full
    shared_root: list[int] = field(default_factory=list)


@dataclass
class SyncRequest:
    """Gather the weights (every rank) and send them as `version` to every engine of the role (rank 0)."""
    version: int
    transport: str
    bucket_mb: int
    workers_per_engine: int = 1   # the agent engines' tensor-parallel size
    engines: Optional[list] = None  # a changed list of the role's engines (one was restarted): the transport is rebuilt
    timeout_s: float = 600.0       # weight_sync.timeout_s: the transfer group's collectives
    verify: str = "every"          # weight_sync.verify: which syncs compare the engines' digests with the sender's


@dataclass
class SaveRequest:
    directory: str


@dataclass
class LoadRequest:
    directory: str


@dataclass
class ReferenceRequest:
    """Load the KL's reference model from `model_path` (an HF folder), replacing the one held."""
    model_path: str


@dataclass
class LogprobsRequest:
    """Trainer-side logprobs of the sequences in the shard (every rank gets the same shard), under the
    model's own distribution (temperature 1, as an engine reports greedy tokens) unless told otherwise."""
    temperature: float = 1.0


@dataclass
class StopRequest:
    pass


# --------------------------------------------------------------------------- results

@dataclass
class WorkerReady:
    rank: int
    zero_stage: int
    local_params: int             # parameter elements this rank holds (ZeRO-3 partitions them)
    total_params: int
    pid: int = 0                  # the worker's process (fault-injection tests kill it)
    node_id: str = ""             # its Ray node (a staged checkpoint is copied from there)


@dataclass
class WorkerFailure:
    rank: int
    traceback: str
    arrival: int = 0              # set by the mailbox: the first failure is the cause, later ones its echo


@dataclass
class RankStepResult:
    """One rank's share of a GRPO step, as token sums (epoch 0 of the step)."""
    rank: int
    tokens: int                   # agent tokens trained on by this rank
    loss_sum: float
    pg_loss_sum: float
    kl_sum: float
    entropy_sum: float
    clipped_tokens: float
    mismatch_sum: float           # |rollout logprob - trainer logprob| over the agent tokens
    mismatch_max: float
    seq_tokens: int               # every token of the rank's sequences (throughput)
    grad_norm: Optional[float] = None
    seconds: float = 0.0
    peak_mem_mb: float = 0.0


@dataclass
class StepMetrics:
    """The step's figures over the whole batch (logged as `train_<name>`)."""
    loss: float
    pg_loss: float
    kl: float
    entropy: Optional[float]
    clip_fraction: Optional[float]
    grad_norm: Optional[float]
    agent_tokens: int
    step_s: float
    tokens_per_s: Optional[float]
    logprob_mismatch_mean: Optional[float]
    logprob_mismatch_max: Optional[float]
    peak_mem_mb: Optional[float]
    skipped: int = 0            # 1: train.skip_no_signal_steps, no step was taken (figures not computed: None)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def no_step(cls, agent_tokens: int) -> StepMetrics:
        """The record of a step skipped for want of signal: its loss and gradient are 0 by definition."""
        return cls(loss=0.0, pg_loss=0.0, kl=0.0, entropy=None, clip_fraction=None, grad_norm=0.0,
                   agent_tokens=agent_tokens, step_s=0.0, tokens_per_s=None, logprob_mismatch_mean=None,
                   logprob_mismatch_max=None, peak_mem_mb=None, skipped=1)


def aggregate_step(results: Sequence[RankStepResult], wall_s: float) -> StepMetrics:
    """Per-token means over every rank's tokens; the grad norm is global already (rank 0 reports it)."""
    tokens = sum(r.tokens for r in results)

    def mean(key: str) -> float:
        return sum(getattr(r, key) for r in results) / max(1, tokens)
    return StepMetrics(
        loss=mean("loss_sum"), pg_loss=mean("pg_loss_sum"), kl=mean("kl_sum"), entropy=mean("entropy_sum"),
        clip_fraction=mean("clipped_tokens"), grad_norm=results[0].grad_norm if results else None,
        agent_tokens=tokens, step_s=wall_s,
        tokens_per_s=sum(r.seq_tokens for r in results) / wall_s if wall_s > 0 else 0.0,
        logprob_mismatch_mean=mean("mismatch_sum"), logprob_mismatch_max=max((r.mismatch_max for r in results), default=0.0),
        peak_mem_mb=max((r.peak_mem_mb for r in results), default=0.0))


@dataclass
class SyncResult:
    version: int
    mb: float
    gather_publish_s: Optional[float]   # file transports: gather + write; None when gathering streams into sending
    apply_s: Optional[float]            # until the slowest engine serves the version
    total_s: float
    # weight_sync.verify (sead_ray.training.weight_digest): None, not checked; True, every engine received the
    # tensors as sent; False, `mismatched` names each engine and tensor that differ
    verified: Optional[bool] = None
    mismatched: list[str] = field(default_factory=list)
    sent_digest: Optional[tuple[float, float]] = None   # sum and sum of squares of every element sent
    digest_s: Optional[float] = None    # the sender's digest + the slowest engine's: what checking cost this sync

    def checked(self) -> SyncResult:
        """Itself, unless an engine received other weights than were sent: then WeightSyncFailed names them."""
        if self.verified is False:
            shown = "; ".join(self.mismatched[:5]) + (f"; and {len(self.mismatched) - 5} more"
                                                      if len(self.mismatched) > 5 else "")
            raise WeightSyncFailed(f"weight sync v{self.version}: the engines received other weights than the trainer "
                                   f"sent (weight_sync.verify): {shown}")
        return self


def shard_samples(samples: Sequence[Sample], world_size: int, per_rank_capacity: int) -> list[list[Sample]]:
    """Spread samples over ranks, longest first, to the rank with the fewest tokens that has room."""
    shards: list[list[Sample]] = [[] for _ in range(world_size)]
    loads = [0] * world_size
    for s in sorted(samples, key=lambda s: -len(s.token_ids)):
        candidates = [r for r in range(world_size) if len(shards[r]) < per_rank_capacity]
        r = min(candidates or range(world_size), key=lambda r: loads[r])
        shards[r].append(s)
        loads[r] += len(s.token_ids)
    return shards
