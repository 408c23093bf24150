"""The KL's reference under real DeepSpeed ZeRO-3 on 2 ranks (gloo): the trainer's own rank code (actors.trainer_rank)
starts with the start model as its reference, steps away from it (the KL grows), saves a checkpoint, and takes that
checkpoint as its new reference (ReferenceRequest, what the loop sends after the SOP rehearsal): the KL to it is 0,
the policy unchanged."""
from __future__ import annotations

import os

import pytest
import torch

from sead_ray.training.trainer_protocol import (
    ReferenceRequest,
    SaveRequest,
    StepRequest,
    TrainerSettings,
    grad_accum_steps,
    shard_samples,
)
from tests.system.test_shared_prefix_zero import _free_port, rank_worker
from tests.unit.training.test_shared_prefix import agent_calls

pytestmark = pytest.mark.slow


def _rank(rank: int, world: int, port: int, settings: TrainerSettings, samples: list, folder: str) -> None:
    import torch.distributed as dist
    worker = rank_worker(rank, world, port, settings)
    shard = shard_samples(samples, world, settings.grad_accum_steps * settings.micro_batch_size)[rank]
    request = StepRequest(sum(sum(s.loss_mask) for s in samples))

    def kl() -> float:
        return worker.step(request, shard).kl_sum
    kls = {"start": kl()}
    kls["moved"] = kl()   # the first step moved the policy away from the start model
    worker.save(SaveRequest(folder))
    request.lr = 1e-12     # from here on the policy stays where it was saved (0 would mean the configured rate)
    kls["saved, old reference"] = kl()
    worker.reference(ReferenceRequest(os.path.join(folder, "hf")))
    kls["saved, new reference"] = kl()
    if rank == 0:
        torch.save(kls, os.path.join(folder, "kls.pt"))
    dist.destroy_process_group()


@pytest.mark.timeout(600)
def test_a_checkpoint_becomes_the_kl_reference_on_every_zero3_rank(smollm_tokenizer, scenario, tmp_path):
    import torch.multiprocessing as mp

    from sead_ray.core.models import resolve_model
    samples = agent_calls(smollm_tokenizer, scenario, n_groups=2)
    world, mbs = 2, 2
    start = str(resolve_model("tiny:llama-h64"))
    settings = TrainerSettings(model_path=start, seed=0, dtype="float32", lr=1e-2, zero_stage=3, micro_batch_size=mbs,
                               grad_accum_steps=grad_accum_steps(len(samples), world, mbs), grad_clip=1.0,
                               clip_eps=0.2, kl_coef=0.1, entropy_coef=0.0, ppo_epochs=1, max_seq_len=4096,
                               gradient_checkpointing=False, temperature=0.7, threads=1, shared_prefix="auto",
                               reference_path=start)
    mp.start_processes(_rank, args=(world, _free_port(), settings, samples, str(tmp_path)), nprocs=world, join=True,
                       start_method="spawn")
    kls = torch.load(tmp_path / "kls.pt")
    assert kls["start"] == pytest.approx(0.0, abs=1e-6)         # the policy is the start model
    assert kls["moved"] > 1e-4 and kls["saved, old reference"] > 1e-4
    assert kls["saved, new reference"] == pytest.approx(0.0, abs=1e-6 * kls["moved"] + 1e-9)
