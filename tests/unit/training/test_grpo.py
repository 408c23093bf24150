import types

import pytest
import torch

from sead_ray.core.config_schema import ConfigError
from sead_ray.training.grpo import collate, compute_advantages, forward_logprobs, policy_loss
from sead_ray.training.rewards import REWARDS, outcome_reward, simulator_reward


class LogitsTableLM(torch.nn.Module):
    """A toy causal LM whose logits are a learnable table [B, L, V] (the interface of an HF model's
    forward: input_ids, attention_mask, logits_to_keep -> .logits), so gradients per position show."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(logits.clone())

    def forward(self, input_ids, attention_mask, logits_to_keep=0):
        # as transformers' causal LMs: an int keeps that many last positions, a tensor the positions it names
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return types.SimpleNamespace(logits=self.table[:, keep])


def _batch(ids, mask):
    n, L = ids.shape
    return collate(ids.tolist(), [[0] + row for row in mask.int().tolist()], [[0.0] * L] * n, [1.0, -1.0][:n], pad_id=0)


def test_the_outcome_reward_is_the_papers_binary_reward_less_the_format_penalty():
    from types import SimpleNamespace as call
    paper, shaped = call(success_reward=1.0, format_penalty=0.0), call(success_reward=10.0, format_penalty=0.5)
    assert REWARDS.get("outcome") is outcome_reward
    assert outcome_reward(call(success=True, agent_parse_failures=0), paper) == 1.0
    assert outcome_reward(call(success=False, agent_parse_failures=3), paper) == 0.0
    assert outcome_reward(call(success=True, agent_parse_failures=2), shaped) == 9.0
    assert simulator_reward(call(success=True, agent_parse_failures=2), shaped) == -10.0


def test_batch_mean_is_the_paper():
    assert compute_advantages([1, 0, 0, 1], [0, 0, 1, 1], "batch_mean") == pytest.approx([0.5, -0.5, -0.5, 0.5])


def test_group_mean_and_group_norm():
    r, g = [1, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]
    assert compute_advantages(r, g, "group_mean") == pytest.approx([2 / 3, -1 / 3, -1 / 3, -2 / 3, 1 / 3, 1 / 3])
    std = (2 / 9) ** 0.5
    assert compute_advantages(r, g, "group_norm") == pytest.approx(
        [2 / 3 / std, -1 / 3 / std, -1 / 3 / std, -2 / 3 / std, 1 / 3 / std, 1 / 3 / std], rel=1e-4)
    # A group whose rollouts all agree teaches nothing (and never divides by zero).
    assert compute_advantages([1, 1, 0, 0], [0, 0, 1, 1], "group_norm") == [0.0] * 4
    assert compute_advantages([], [], "group_norm") == []
    with pytest.raises(ValueError):
        compute_advantages([1], [0, 1])
    with pytest.raises(ValueError, match="train.advantage_mode = 'critic' names no registered advantage estimator; "
                       "known: batch_mean, group_mean, group_norm"):
        compute_advantages([1], [0], "critic")


def test_collate_aligns_masks_with_targets():
    batch = collate([[5, 6, 7, 8], [5, 9]], [[0, 0, 1, 1], [0, 1]], [[0, 0, -1.0, -2.0], [0, -3.0]], [1.0, -1.0], pad_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8], [5, 9, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch.loss_mask.tolist() == [[0, 1, 1], [1, 0, 0]]
    assert batch.old_logprobs.tolist() == [[0, -1.0, -2.0], [-3.0, 0, 0]]
    truncated = collate([[5, 6, 7, 8]], [[0, 0, 1, 1]], [[0, 0, -1.0, -2.0]], [1.0], pad_id=0, max_len=3)
    assert truncated.loss_mask.tolist() == [[0, 1]]
    with pytest.raises(ValueError, match="differ in length"):
        collate([[1, 2]], [[0]], [[0.0, 0.0]], [1.0], pad_id=0)


def test_forward_logprobs_match_log_softmax_and_entropy_where_trained():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 11)
    ids = torch.randint(0, 11, (2, 6))
    # positions 1 and 3 are trained by some row; 0, 2 and 4 by none (prompt, a simulator turn)
    mask = torch.tensor([[0, 0, 0, 1, 0], [0, 1, 0, 0, 0]], dtype=torch.float32)
    lp, ent = forward_logprobs(LogitsTableLM(logits), _batch(ids, mask), with_entropy=True)
    full = torch.log_softmax(logits[:, :-1], -1)
    want_lp = full.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    want_ent = -(full.exp() * full).sum(-1)
    trained, untrained = [1, 3], [0, 2, 4]
    # logits are computed only where some row trains; the other positions stay 0
    assert torch.allclose(lp[:, trained], want_lp[:, trained], atol=1e-5) and (lp[:, untrained] == 0).all()
    assert torch.allclose(ent[:, trained], want_ent[:, trained], atol=1e-5) and (ent[:, untrained] == 0).all()
    # sampled at temperature T, the policy is softmax(logits / T), as vLLM's processed logprobs report it
    cold, _ = forward_logprobs(LogitsTableLM(logits), _batch(ids, mask), temperature=0.5)
    want_cold = torch.log_softmax(logits[:, :-1] / 0.5, -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(cold[:, trained], want_cold[:, trained], atol=1e-5) and not torch.allclose(cold, lp)


def test_forward_logprobs_of_a_real_causal_lm_agree_with_its_full_forward():
    """transformers' Llama takes the trained positions as `logits_to_keep` indices: the logprobs there
    are those of the full forward pass, and the gradient reaches the same parameters."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1)).eval()
    ids = torch.randint(0, 50, (2, 9))
    mask = torch.zeros(2, 8)
    mask[0, 2:4] = mask[0, 6:8] = mask[1, 3] = 1   # two agent turns around a simulator turn; one short row
    batch = _batch(ids, mask)
    lp, _ = forward_logprobs(model, batch)
    full = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), -1)
    want = full.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    trained = mask.sum(0) > 0
    assert torch.allclose(lp[:, trained], want[:, trained], atol=1e-5)
    assert (lp[:, ~trained] == 0).all()
    (lp * mask).sum().backward()
    assert model.lm_head.weight.grad.abs().sum() > 0 and model.model.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0


def test_loss_only_touches_masked_tokens():
    torch.manual_seed(0)
    model = LogitsTableLM(torch.randn(2, 5, 11))
    ids = torch.randint(0, 11, (2, 5))
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 0, 0]], dtype=torch.float32)
    lp, _ = forward_logprobs(model, _batch(ids, mask))
    loss, stats = policy_loss(lp, lp.detach(), torch.tensor([1.0, -1.0]), mask)
    loss.backward()
    grad_positions = (model.table.grad.abs().sum(-1) > 0)
    # target t+1 is predicted at position t: mask[b, t] -> logits[b, t]
    assert grad_positions.tolist() == [[False, False, True, True, False], [False, True, False, False, False]]
    assert stats.tokens == 3 and stats.ratio_mean == pytest.approx(1.0)


def test_loss_value_and_sign():
    lp = torch.log(torch.tensor([[0.5, 0.25]]))
    old = lp.clone()
    mask = torch.ones(1, 2)
    loss, _ = policy_loss(lp, old, torch.tensor([2.0]), mask)
    assert float(loss) == pytest.approx(-2.0)  # ratio 1: -mean(A)
    # Positive advantage: gradient raises the logprobs of the sampled tokens.
    lp_param = lp.clone().requires_grad_(True)
    loss, _ = policy_loss(lp_param, old, torch.tensor([1.0]), mask)
    loss.backward()
    assert (lp_param.grad < 0).all()


def test_clipping_stops_gradients_past_the_trust_region():
    old = torch.zeros(1, 2)
    lp = torch.tensor([[0.5, -0.5]], requires_grad=True)   # ratio e^0.5 > 1.2 and e^-0.5 < 0.8
    loss, stats = policy_loss(lp, old, torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2)
    loss.backward()
    assert lp.grad[0, 0] == 0.0          # A > 0 and ratio above 1 + eps: clipped
    assert lp.grad[0, 1] != 0.0          # A > 0 and ratio below 1 - eps: still pushed up
    assert stats.clip_fraction == 1.0


def test_kl_term_is_zero_at_reference_and_positive_away():
    lp = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    _, same = policy_loss(lp, lp, torch.tensor([0.0]), mask, ref_logprobs=lp, kl_coef=0.1)
    assert same.kl == pytest.approx(0.0)
    loss, away = policy_loss(lp, lp, torch.tensor([0.0]), mask, ref_logprobs=lp - 0.5, kl_coef=0.1)
    assert away.kl > 0 and float(loss) == pytest.approx(0.1 * away.kl)


def test_entropy_bonus():
    ids, mask = torch.tensor([[1, 2, 3]]), torch.ones(1, 2)
    _, ent = forward_logprobs(LogitsTableLM(torch.zeros(1, 3, 4)), _batch(ids, mask), with_entropy=True)
    assert torch.allclose(ent, torch.full((1, 2), torch.log(torch.tensor(4.0)).item()))
    lp = torch.zeros(1, 2)
    loss, stats = policy_loss(lp, lp, torch.tensor([0.0]), torch.ones(1, 2), entropy=ent, entropy_coef=0.5)
    assert float(loss) == pytest.approx(-0.5 * stats.entropy)


def test_normalized_micro_batches_add_up_to_the_batch_mean():
    torch.manual_seed(1)
    lp = torch.randn(4, 6)
    old = lp + 0.05 * torch.randn(4, 6)
    adv = torch.tensor([1.0, -0.5, 0.3, 2.0])
    mask = (torch.rand(4, 6) > 0.3).float()
    whole, _ = policy_loss(lp, old, adv, mask)
    total = int(mask.sum())
    parts = sum(policy_loss(lp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], normalizer=total)[0]
                for i in (0, 2))
    assert float(parts) == pytest.approx(float(whole), rel=1e-5)


def test_gradient_norm_is_the_norm_of_all_gradients_together():
    from sead_ray.training.grpo import gradient_norm
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1, 1))
    frozen = torch.nn.Parameter(torch.ones(3))
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([[4.0]])
    assert gradient_norm([a, b, frozen]) == pytest.approx(5.0)      # a parameter without a gradient counts 0
    assert gradient_norm([frozen]) == 0.0


def test_reported_entropy_is_chunked_without_a_graph_and_trained_entropy_has_one(monkeypatch):
    """entropy_coef = 0: the entropy is only reported, computed in chunks of positions with no autograd graph
    (no full-vocabulary softmax of the whole call); the chunked figures equal the one-pass ones."""
    import sead_ray.training.grpo as grpo
    torch.manual_seed(1)
    logits = torch.randn(2, 9, 13)
    ids = torch.randint(0, 13, (2, 9))
    mask = torch.tensor([[0, 1, 1, 0, 1, 1, 1, 0], [1, 0, 0, 1, 1, 0, 0, 1]], dtype=torch.float32)
    model = LogitsTableLM(logits)
    _, trained = forward_logprobs(model, _batch(ids, mask), with_entropy=True, entropy_grad=True)
    assert trained.requires_grad
    monkeypatch.setattr(grpo, "ENTROPY_CHUNK_POSITIONS", 3)   # 8 trained positions: chunks of 3, 3 and 2
    _, reported = forward_logprobs(model, _batch(ids, mask), with_entropy=True, entropy_grad=False)
    assert not reported.requires_grad
    assert torch.allclose(reported, trained.detach(), atol=1e-6)


def test_milestones_rewards_the_agenda_done_by_the_policy_and_any_win_beats_any_failure(scenario):
    """The bonus is the rule user's agenda done after the scripted start; capped below half a win."""
    import asyncio

    from sead_ray.agent.scripted import HONEST, ScriptAgent
    from sead_ray.play.dialogue import CallSettings, run_dialogue
    from sead_ray.training.rewards import REWARDS
    from tests.conftest import tiny_config
    from tests.unit.play.test_dialogue import rule_user, scripted_agent
    from tests.unit.play.test_starts import _profiles
    train = tiny_config("train.reward=milestones", "user.backend=rule", "train.milestone_weight=0.49").train
    reward = REWARDS.get("milestones")
    settings = CallSettings(6, 2, 1, scenario.status_guards)
    profile = _profiles(scenario)[0]
    honest = ScriptAgent(scenario, HONEST)

    async def honest_fn(dialogue_id, turn, messages, prompt_ids):
        return await honest.generate(dialogue_id, prompt_ids, messages=messages)
    won = asyncio.run(run_dialogue("w", profile, scenario, honest_fn, rule_user(scenario), settings))
    opening = [won.turns[0].agent_raw]
    # the honest opening then silence: identified and offered, no concern answered, no win
    stalled = asyncio.run(run_dialogue("s", profile, scenario, scripted_agent(["Have a nice day."]), rule_user(scenario),
                                       settings, scripted=opening))
    cold_stall = asyncio.run(run_dialogue("c", profile, scenario, scripted_agent(["Have a nice day."]),
                                          rule_user(scenario), settings))
    assert won.success and won.agenda_gain == 1.0 and reward(won, train) == pytest.approx(1.49)
    assert not stalled.success and stalled.agenda_gain == 0.0    # what the script did is not the policy's
    assert not cold_stall.success and cold_stall.agenda_gain == 0.0 and reward(cold_stall, train) == 0.0
    best_failure = 0.49   # a failure with the whole agenda done but no ask
    assert reward(won, train) - 0.49 > best_failure               # the worst win still beats the best failure
    from sead_ray.runs.inputs import check_extension_points  # by the simulator's declaration (UserBackend.agenda)
    with pytest.raises(ConfigError, match="milestones reads the simulator's agenda"):
        check_extension_points(tiny_config("train.reward=milestones", "user.backend=vllm"))
    with pytest.raises(ConfigError, match="milestone_weight"):
        tiny_config("train.milestone_weight=0.5")
