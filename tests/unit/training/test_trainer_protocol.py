"""The trainer's figures and gradient equal a single-process recomputation on the same batch, whatever
the micro-batch size, accumulation steps and number of ranks (ranks simulated in one process with the
very code each rank runs: sharding, padded micro-batches, `grpo_update`, `aggregate_step`)."""
import pytest
import torch

from sead_ray.training.grpo import ModelForward, collate, forward_logprobs, grpo_update, micro_batches, policy_loss
from sead_ray.training.trainer_protocol import (
    RankStepResult,
    Sample,
    TrainerSettings,
    aggregate_step,
    grad_accum_steps,
    shard_samples,
)
from tests.conftest import tiny_config

VOCAB, PAD = 64, 0


def _tiny_llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).float()


def _batch(n: int = 8, seed: int = 0) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    samples = []
    for _ in range(n):
        length = int(torch.randint(6, 20, (1,), generator=g))
        ids = torch.randint(1, VOCAB, (length,), generator=g).tolist()
        prompt = int(torch.randint(2, length - 2, (1,), generator=g))   # agent tokens after the prompt
        mask = [0] * prompt + [1] * (length - prompt)
        logprobs = [0.0] * prompt + (-torch.rand(length - prompt, generator=g)).tolist()
        samples.append(Sample(ids, mask, logprobs, float(torch.randn(1, generator=g))))
    return samples


def _settings(mbs: int, gas: int, kl: float, ent: float) -> TrainerSettings:
    return TrainerSettings(model_path="", seed=0, dtype="float32", lr=0.0, zero_stage=3, micro_batch_size=mbs,
                           grad_accum_steps=gas, grad_clip=1.0, clip_eps=0.2, kl_coef=kl, entropy_coef=ent,
                           ppo_epochs=1, max_seq_len=4096, gradient_checkpointing=False)


def _run_ranks(model, ref, samples, settings, world):
    """Every rank's step on its shard; gradients accumulate as DeepSpeed applies them: averaged over
    ranks and scaled by 1/accumulation steps."""
    model.zero_grad()
    shards = shard_samples(samples, world, settings.grad_accum_steps * settings.micro_batch_size)
    global_tokens = sum(sum(s.loss_mask) for s in samples)
    scale = 1.0 / (world * settings.grad_accum_steps)

    policy = ModelForward(model, entropy_grad=settings.entropy_coef > 0)
    reference = ModelForward(ref)
    results = []
    for rank, shard in enumerate(shards):
        batches = micro_batches(shard, settings.micro_batch_size, PAD, pad_to=settings.grad_accum_steps)
        results.append(grpo_update(policy, lambda loss: (loss * scale).backward(), batches, settings, rank=rank,
                                   world_size=world, global_tokens=global_tokens,
                                   reference=reference if settings.kl_coef > 0 else None))
    return results, [p.grad.clone() for p in model.parameters()]


def _single_process(model, ref, samples, settings):
    model.zero_grad()
    batch = collate([s.token_ids for s in samples], [s.loss_mask for s in samples],
                    [s.rollout_logprobs for s in samples], [s.advantage for s in samples], pad_id=PAD)
    logprobs, entropy = forward_logprobs(model, batch, with_entropy=True, entropy_grad=settings.entropy_coef > 0)
    with torch.no_grad():
        ref_lp = forward_logprobs(ref, batch)[0]
    loss, stats = policy_loss(logprobs, logprobs.detach(), batch.advantages, batch.loss_mask, settings.clip_eps,
                              ref_logprobs=ref_lp, kl_coef=settings.kl_coef, entropy=entropy,
                              entropy_coef=settings.entropy_coef)
    loss.backward()
    return stats, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("mbs,gas,world", [(1, 1, 1), (1, 2, 2), (2, 2, 2)])
def test_logged_figures_and_gradient_equal_one_process_recomputation(mbs, gas, world):
    model, ref = _tiny_llama(0), _tiny_llama(1)
    samples = _batch(n=mbs * gas * world, seed=mbs + gas + world)
    assert grad_accum_steps(len(samples), world, mbs) == gas
    settings = _settings(mbs, gas, kl=0.1, ent=0.01)
    results, grads = _run_ranks(model, ref, samples, settings, world)
    metrics = aggregate_step(results, wall_s=1.0)
    expected, expected_grads = _single_process(model, ref, samples, settings)
    assert metrics.agent_tokens == sum(sum(s.loss_mask) for s in samples) == expected.tokens
    for name in ("loss", "pg_loss", "kl", "entropy"):
        assert getattr(metrics, name) == pytest.approx(getattr(expected, name), rel=1e-4, abs=1e-6), name
    assert metrics.kl > 0 and metrics.entropy > 0 and metrics.loss != pytest.approx(metrics.pg_loss)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_loss_equals_pg_loss_without_kl_and_entropy():
    model, ref = _tiny_llama(0), _tiny_llama(1)
    samples = _batch(n=8, seed=3)
    results, _ = _run_ranks(model, ref, samples, _settings(2, 2, kl=0.0, ent=0.0), world=2)
    metrics = aggregate_step(results, wall_s=1.0)
    assert metrics.loss == pytest.approx(metrics.pg_loss, rel=1e-6) and metrics.loss != 0


def test_aggregation_weights_ranks_by_their_tokens():
    def rank(r, tokens, pg_sum, mismatch_max):
        return RankStepResult(r, tokens, pg_sum, pg_sum, 0.0, 0.0, 0.0, 0.0, mismatch_max, seq_tokens=10,
                              grad_norm=0.5 if r == 0 else None)
    metrics = aggregate_step([rank(0, 30, 3.0, 0.1), rank(1, 10, 5.0, 0.3)], wall_s=2.0)
    assert metrics.pg_loss == pytest.approx(8.0 / 40) and metrics.loss == metrics.pg_loss   # not (0.1 + 0.5) / 2
    assert metrics.grad_norm == 0.5 and metrics.logprob_mismatch_max == 0.3 and metrics.tokens_per_s == 10.0


def test_shards_balance_tokens_and_respect_capacity():
    samples = [Sample([1] * n, [1] * n, [0.0] * n, 0.0) for n in (50, 40, 30, 20, 10, 5)]
    shards = shard_samples(samples, 2, per_rank_capacity=3)
    assert sorted(len(s) for s in shards) == [3, 3]
    loads = [sum(len(x.token_ids) for x in s) for s in shards]
    assert abs(loads[0] - loads[1]) <= 15
    with pytest.raises(ValueError, match="more than"):
        micro_batches(samples, 1, PAD, pad_to=2)


@pytest.mark.parametrize("overrides,role,reference", [
    (["train.kl_coef=0.1", "train.warm_start=none"], "agent", "start"),
    (["train.kl_coef=0.1", "train.warm_start=sop_rehearsal"], "agent", None),   # the rehearsed agent, once it exists
    (["train.kl_coef=0.1", "train.warm_start=sop_rehearsal"], "user", "start"),  # the simulator is not rehearsed
    (["train.kl_coef=0", "train.warm_start=none"], "agent", None)])
def test_the_kl_reference_at_start_is_the_start_model_unless_a_rehearsal_comes_first(overrides, role, reference):
    settings = TrainerSettings.from_config(tiny_config(*overrides), "start", role)
    assert settings.reference_path == reference
