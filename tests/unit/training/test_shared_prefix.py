"""Each shared prefix computed once (sead_ray.training.shared_prefix) is exact: on a batch of real agent contexts
(the scenario's system prompt through the SmolLM2 chat template) mixing cold calls, scripted starts of a group
and calls of different lengths, the per-token logprobs equal the per-call path within 1e-5 and the parameter
gradients of a GRPO update (policy loss, KL to a reference, entropy, two PPO epochs) within a relative 1e-4, with
gradient checkpointing on and off, on a small Llama with grouped KV heads and on the embedded 135M model. The same
comparison under real DeepSpeed (ZeRO-0 x 1, ZeRO-3 x 2): tests/system/test_shared_prefix_zero.py."""
from __future__ import annotations

import json

import pytest
import torch

from sead_ray.agent.prompt import agent_messages, user_message_for_agent
from sead_ray.agent.token_context import IncrementalChatEncoder
from sead_ray.training.grpo import ModelForward, grpo_update, micro_batches
from sead_ray.training.shared_prefix import (
    PrefixKV,
    batch_shared_len,
    common_prefix_len,
    install,
    shared_root,
    trainable_prefix_len,
    unsupported_reason,
)
from sead_ray.training.trainer_protocol import Sample, TrainerSettings

PAD = 0


def agent_calls(tokenizer, scenario, n_groups: int = 3) -> list[Sample]:
    """Calls as the trainer receives them: cold calls (the agent's first reply right after the system prompt) and
    calls started at a depth (the honest script's turns as context, the same for the calls of a group), 1-3
    agent turns each, replies of different lengths, varied advantages and rollout logprobs."""
    g = torch.Generator().manual_seed(7)
    facts = list(scenario.facts)
    samples = []
    for group in range(n_groups):
        scripted = facts[group % len(facts)] if group % 3 else None     # every third group a cold call
        for rollout in range(2):
            encoder = IncrementalChatEncoder(tokenizer, agent_messages(scenario, [], []))
            if scripted is not None:
                encoder.add_scripted(json.dumps({"reply": scripted}))
                encoder.add_user(user_message_for_agent(scenario, "Why are you calling me?"))
            for turn in range(1 + (group + rollout) % 3):
                reply = facts[(group + rollout + turn) % len(facts)][: 40 + 30 * rollout]
                ids = tokenizer(json.dumps({"reply": reply}), add_special_tokens=False)["input_ids"]
                ids = ids + [tokenizer.eos_token_id]
                encoder.add_generation(ids, (-torch.rand(len(ids), generator=g) * 0.5).tolist())
                encoder.add_user(user_message_for_agent(scenario, f"And what about point {turn}?"))
            samples.append(Sample(encoder.token_ids, encoder.loss_mask, encoder.logprobs,
                                  float(torch.randn(1, generator=g))))
    return samples


def settings(**overrides) -> TrainerSettings:
    values = dict(model_path="", seed=0, dtype="float32", lr=0.0, zero_stage=0, micro_batch_size=2,
                  grad_accum_steps=3, grad_clip=1.0, clip_eps=0.2, kl_coef=0.05, entropy_coef=0.01, ppo_epochs=2,
                  max_seq_len=4096, gradient_checkpointing=False, temperature=0.7)
    return TrainerSettings(**{**values, **overrides})


def update(model, reference, samples, s: TrainerSettings, shared: bool, checkpointing: bool):
    """One rank's GRPO update as the trainer runs it (gradient accumulation as DeepSpeed scales it); the
    parameters' gradients and the figures."""
    model.zero_grad(set_to_none=True)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_disable()
    model.train()
    root = shared_root([x.token_ids for x in samples], [x.loss_mask for x in samples], s.max_seq_len) if shared else []
    batches = micro_batches(samples, s.micro_batch_size, PAD, s.max_seq_len, pad_to=s.grad_accum_steps, root=root)
    policy = ModelForward(model, temperature=s.temperature, entropy_grad=s.entropy_coef > 0)
    result = grpo_update(policy, lambda loss: (loss / s.grad_accum_steps).backward(), batches, s, rank=0,
                         world_size=1, global_tokens=sum(sum(x.loss_mask) for x in samples),
                         reference=ModelForward(reference, temperature=s.temperature) if reference else None,
                         root=root)
    return result, {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def per_call_logprobs(model, samples, shared: bool, mbs: int) -> dict:
    """Each call's logprobs at its trained positions, keyed by the call's tokens."""
    root = shared_root([x.token_ids for x in samples], [x.loss_mask for x in samples], 4096) if shared else []
    forward = ModelForward(model, temperature=0.7)
    out = {}
    with torch.no_grad():
        past = forward.prefix(root) if root else None
        for b in micro_batches(samples, mbs, PAD, root=root):
            lp, _ = forward.logprobs(b, False, past)
            for row in range(len(b.input_ids)):
                n = int(b.attention_mask[row].sum())
                key = tuple(b.input_ids[row, :n].tolist())
                out[key] = lp[row, : n - 1][b.loss_mask[row, : n - 1] > 0]
    return out


def assert_same_gradients(got: dict, want: dict, rtol: float = 1e-4) -> None:
    assert got.keys() == want.keys()
    for name in want:
        scale = float(want[name].norm())
        assert scale > 0, name
        assert float((got[name] - want[name]).norm()) <= rtol * scale, (name, float((got[name] - want[name]).norm()), scale)


def small_llama(vocab: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096))


@pytest.fixture(scope="module")
def calls(smollm_tokenizer, scenario):
    samples = agent_calls(smollm_tokenizer, scenario)
    return samples


@pytest.fixture(scope="module")
def models(smollm_tokenizer):
    policy, reference = small_llama(len(smollm_tokenizer), 0), small_llama(len(smollm_tokenizer), 1)
    install(policy)
    install(reference)
    return policy, reference


def test_the_batch_is_what_the_shared_path_must_handle(calls):
    """Cold and scripted calls, of different lengths, sharing the system prompt and, in pairs, their scripted start."""
    root = shared_root([x.token_ids for x in calls], [x.loss_mask for x in calls], 4096)
    assert len(root) > 400   # the scenario's system prompt
    assert len({len(x.token_ids) for x in calls}) >= 4
    starts = [trainable_prefix_len(x.token_ids, x.loss_mask) for x in calls]
    assert min(starts) == len(root) + 1 and max(starts) > len(root) + 20   # cold calls, and scripted ones
    batches = micro_batches(calls, 2, PAD, root=root)
    assert any(b.shared_len > len(root) + 20 for b in batches)   # a group's scripted turns computed once


@pytest.mark.parametrize("mbs", [1, 2, 4])
def test_logprobs_equal_the_per_call_path(models, calls, mbs):
    policy, _ = models
    policy.eval()
    want = per_call_logprobs(policy, calls, shared=False, mbs=mbs)
    got = per_call_logprobs(policy, calls, shared=True, mbs=mbs)
    assert got.keys() == want.keys() and len(want) == len(calls)
    for key in want:
        assert len(want[key]) > 0
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-5)


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("mbs", [1, 2])
def test_update_gives_the_per_call_loss_and_gradients(models, calls, checkpointing, mbs):
    policy, reference = models
    s = settings(micro_batch_size=mbs, grad_accum_steps=-(-len(calls) // mbs) + 1)   # and one padding micro-batch
    want_result, want = update(policy, reference, calls, s, shared=False, checkpointing=checkpointing)
    got_result, got = update(policy, reference, calls, s, shared=True, checkpointing=checkpointing)
    assert got_result.tokens == want_result.tokens > 0
    for name in ("loss_sum", "pg_loss_sum", "kl_sum", "entropy_sum", "mismatch_sum"):
        assert getattr(got_result, name) == pytest.approx(getattr(want_result, name), rel=1e-5, abs=1e-6), name
    assert want_result.kl_sum > 0 and want_result.entropy_sum > 0
    assert_same_gradients(got, want)
    # the root's gradient reached the embeddings of the system prompt's tokens once, from every call
    embed = "model.embed_tokens.weight"
    assert float(want[embed][calls[0].token_ids[5]].norm()) > 0


def test_the_comparison_fails_when_the_root_loses_the_earlier_micro_batches_gradient(models, calls, monkeypatch):
    """The check above can fail: a shared path whose last micro-batch forgot the gradient the others left on the
    root's copies (no hook) gives other gradients."""
    policy, reference = models
    s = settings(micro_batch_size=2, grad_accum_steps=3, kl_coef=0.0, entropy_coef=0.0, ppo_epochs=1)
    _, want = update(policy, reference, calls, s, shared=False, checkpointing=False)
    monkeypatch.setattr(PrefixKV, "joined", lambda self: self)
    _, broken = update(policy, reference, calls, s, shared=True, checkpointing=False)
    with pytest.raises(AssertionError):
        assert_same_gradients(broken, want)


def test_the_embedded_135m_model_gives_the_per_call_logprobs_and_gradients(smollm_tokenizer, scenario):
    from transformers import AutoModelForCausalLM

    from sead_ray.core.models import prepare_embedded
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(prepare_embedded(), dtype=torch.float32)
    assert unsupported_reason(model) is None
    install(model)
    samples = agent_calls(smollm_tokenizer, scenario, n_groups=2)[:3]   # a cold call, two of a scripted group
    s = settings(micro_batch_size=2, grad_accum_steps=2, kl_coef=0.0, ppo_epochs=1)
    want_result, want = update(model, None, samples, s, shared=False, checkpointing=True)
    got_result, got = update(model, None, samples, s, shared=True, checkpointing=True)
    # the logprobs of the sampled tokens, summed: policy loss at ratio 1 is -mean(advantage), so compare mismatch
    assert got_result.mismatch_sum == pytest.approx(want_result.mismatch_sum, rel=1e-5)
    assert got_result.pg_loss_sum == pytest.approx(want_result.pg_loss_sum, rel=1e-5)
    assert_same_gradients(got, want)


def test_the_tree_shape():
    rows = [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 9, 9, 9], [1, 2, 3, 8, 8, 8, 8]]
    masks = [[0, 0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 1, 1, 1]]
    assert common_prefix_len(rows) == 3 and common_prefix_len(rows[:2]) == 4
    # token 4 of the third call is trained: position 3 predicts it, so at most 3 tokens precede the suffix
    assert [trainable_prefix_len(r, m) for r, m in zip(rows, masks)] == [4, 5, 3]
    assert shared_root(rows, masks, 4096) == [1, 2]          # one shared token left for each micro-batch
    assert batch_shared_len(rows[:2], masks[:2], root_len=2) == 4
    assert batch_shared_len(rows[2:], masks[2:], root_len=2) == 3
    assert shared_root(rows, masks, max_len=4) == [1]        # truncation at max_seq_len caps it
    assert shared_root([[1, 2], [3, 4]], [[0, 1], [0, 1]], 4096) == []   # nothing shared: every call in full
    batches = micro_batches([Sample(r, m, [0.0] * 7, 1.0) for r, m in zip(rows, masks)], 2, PAD, pad_to=3,
                            root=[1, 2])
    assert [b.shared_len for b in batches] == [4, 3, 3]      # sorted along the tree; padding is the root and pads
    assert batches[2].input_ids.tolist() == [[1, 2, PAD, PAD, PAD]] and batches[2].loss_mask.sum() == 0


def test_models_it_cannot_serve_are_named_with_the_reason():
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM
    assert "gpt2" in unsupported_reason(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16)))
    windowed = Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                            num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True,
                                            sliding_window=4, max_window_layers=0))
    assert "sliding" in unsupported_reason(windowed)
