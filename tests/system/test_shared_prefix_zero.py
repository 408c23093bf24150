"""The shared prefix under real DeepSpeed: the trainer's own rank code (actors.trainer_rank.RankWorker, its step with the
shared root the driver computes) on ZeRO-0 x 1 and on ZeRO-3 x 2 ranks (gloo, the CPU's collectives), gradient
checkpointing off and on. From the same weights (lr 0), the step with the shared prefix gives the per-call step's
loss, grad norm and full gradients (gathered from the ZeRO-3 partitions) within a relative 1e-4; under ZeRO-3 both
ranks run the same forwards (else the collectives would hang; the test's timeout says so)."""
from __future__ import annotations

import os
import socket

import pytest
import torch

from sead_ray.training.shared_prefix import shared_root
from sead_ray.training.trainer_protocol import StepRequest, TrainerSettings, grad_accum_steps, shard_samples
from tests.unit.training.test_shared_prefix import agent_calls, assert_same_gradients

pytestmark = pytest.mark.slow


def rank_worker(rank: int, world: int, port: int, settings: TrainerSettings):
    """The trainer's own rank (actors.trainer_rank.RankWorker) in a spawned process of a gloo group on localhost."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import torch.distributed as dist

    from actors.trainer_rank import RankWorker
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return RankWorker(settings)


def _rank(rank: int, world: int, port: int, settings: TrainerSettings, samples: list, out: str) -> None:
    import torch.distributed as dist
    from deepspeed.utils import safe_get_full_grad
    worker = rank_worker(rank, world, port, settings)
    assert worker.shared_prefix, "the tiny Llama takes the shared-prefix path"
    engine, captured = worker.engine, {}
    real_step = engine.step

    def step(*args, **kwargs):   # the accumulated gradient, before the optimizer (lr 0) consumes it
        if engine.is_gradient_accumulation_boundary():   # under ZeRO-3 gathering a gradient is a collective
            captured["grads"] = {n: safe_get_full_grad(p).detach().clone() for n, p in engine.module.named_parameters()}
        return real_step(*args, **kwargs)
    engine.step = step
    shard = shard_samples(samples, world, settings.grad_accum_steps * settings.micro_batch_size)[rank]
    request = StepRequest(sum(sum(s.loss_mask) for s in samples), None, False,
                          shared_root([s.token_ids for s in samples], [s.loss_mask for s in samples], 4096))
    results = []
    for checkpointing in (False, True):
        if checkpointing:
            engine.module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            engine.module.gradient_checkpointing_disable()
        for shared in (False, True):
            worker.shared_prefix = shared
            r = worker.step(request, shard)
            results.append({"checkpointing": checkpointing, "shared": shared, "loss": r.loss_sum, "tokens": r.tokens,
                            "grad_norm": r.grad_norm, "grads": captured.pop("grads")})
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("zero_stage,world", [(0, 1), (3, 2)])
def test_shared_prefix_step_equals_the_per_call_step_under_deepspeed(zero_stage, world, smollm_tokenizer, scenario,
                                                                      tmp_path):
    import torch.multiprocessing as mp

    from sead_ray.core.models import resolve_model
    samples = agent_calls(smollm_tokenizer, scenario, n_groups=3)
    mbs = 2
    settings = TrainerSettings(model_path=str(resolve_model("tiny:llama-h64")), seed=0, dtype="float32", lr=0.0,
                               zero_stage=zero_stage, micro_batch_size=mbs,
                               grad_accum_steps=grad_accum_steps(len(samples), world, mbs), grad_clip=1.0,
                               clip_eps=0.2, kl_coef=0.0, entropy_coef=0.0, ppo_epochs=1, max_seq_len=4096,
                               gradient_checkpointing=False, temperature=0.7, threads=1, shared_prefix="auto")
    out = tmp_path / "results.pt"
    mp.start_processes(_rank, args=(world, _free_port(), settings, samples, str(out)), nprocs=world, join=True,
                       start_method="spawn")
    results = torch.load(out)
    for checkpointing in (False, True):
        per_call, shared = [r for r in results if r["checkpointing"] == checkpointing]
        assert not per_call["shared"] and shared["shared"]
        assert shared["tokens"] == per_call["tokens"] > 0
        assert shared["loss"] == pytest.approx(per_call["loss"], rel=1e-5, abs=1e-7)
        assert shared["grad_norm"] == pytest.approx(per_call["grad_norm"], rel=1e-4) and per_call["grad_norm"] > 0
        assert_same_gradients(shared["grads"], per_call["grads"])
