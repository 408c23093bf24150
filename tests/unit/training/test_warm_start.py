"""The rehearsal's optimizer state does not reach self-play (sead_ray.training.warm_start.reset_optimizer_state)."""
import copy

import pytest
import torch

from sead_ray.training.warm_start import reset_optimizer_state


class WrapperStandIn:
    """Stands in for DeepSpeed's ZeRO optimizer wrappers: not a torch optimizer, it holds one as `.optimizer`."""

    def __init__(self, optimizer):
        self.optimizer = optimizer


def _step(model, optimizer, target):
    optimizer.zero_grad()
    ((model(torch.ones(1, 4)) - target) ** 2).sum().backward()
    optimizer.step()


def _rehearsed():
    """A model and its AdamW after three steps toward +5 (the rehearsal), the same every call."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    for _ in range(3):
        _step(model, optimizer, torch.full((1, 2), 5.0))
    return model, optimizer


def test_after_the_reset_a_step_is_a_fresh_optimizers_step():
    model, optimizer = _rehearsed()
    fresh_model = copy.deepcopy(model)
    fresh = torch.optim.AdamW(fresh_model.parameters(), lr=1e-2, weight_decay=0.0)
    carried_model, carried = _rehearsed()
    assert reset_optimizer_state(WrapperStandIn(optimizer)) == 2     # weight and bias
    for m, opt in ((model, optimizer), (fresh_model, fresh), (carried_model, carried)):
        _step(m, opt, torch.full((1, 2), -5.0))    # self-play's first step points the other way
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh_model.parameters()))
    # without the reset the step differs (the rehearsal's moments carried): the test can fail
    assert not all(torch.equal(a, b) for a, b in zip(carried_model.parameters(), fresh_model.parameters()))


def test_an_optimizer_with_no_torch_optimizer_inside_is_refused():
    with pytest.raises(TypeError, match="no torch optimizer"):
        reset_optimizer_state(object())


def _script_call(scenario):
    from sead_ray.play.dialogue import Trajectory, Turn
    from sead_ray.scenario.profiles import Profile
    facts = scenario.facts
    turns = [Turn(facts[0], None, "", True, 0, 0, user="What is it about?", user_state=None),
             Turn(facts[1], None, "", True, 0, 0, user="Fine, go on.", user_state=None)]
    state = scenario.allowed_states("soft")[0]
    return Trajectory("d", Profile(state, ()), turns, "success", "accept")


def test_the_decision_weight_moves_the_losss_emphasis_to_each_replys_first_tokens(scenario, smollm_tokenizer):
    from sead_ray.training.warm_start import DECISION_TOKENS, decision_weighted, rehearsal_sample
    plain = rehearsal_sample(_script_call(scenario), scenario, smollm_tokenizer, 4096, '{"reply": "')
    weighted = rehearsal_sample(_script_call(scenario), scenario, smollm_tokenizer, 4096, '{"reply": "', 4.0)
    assert plain.token_ids == weighted.token_ids and set(plain.loss_mask) == {0, 1}
    trained = [i for i, m in enumerate(plain.loss_mask) if m]
    # two turns, each a run of trained tokens; the first DECISION_TOKENS of each weigh 4x the others
    starts = [i for i in trained if not plain.loss_mask[i - 1]]
    assert len(starts) == 2
    decisions = {i for s in starts for i in range(s, s + DECISION_TOKENS)}
    heavy = {weighted.loss_mask[i] for i in decisions}
    light = {round(weighted.loss_mask[i], 9) for i in trained if i not in decisions}
    assert len(heavy) == 1 and len(light) == 1 and heavy.pop() == pytest.approx(4 * light.pop())
    assert sum(weighted.loss_mask) == pytest.approx(len(trained))     # still a token mean
    assert all(weighted.loss_mask[i] == 0 for i in range(len(plain.loss_mask)) if not plain.loss_mask[i])
    assert decision_weighted([0, 1, 1], [1], 1.0) == [0, 1, 1]


def test_the_agents_caps_are_raised_to_hold_the_rehearsed_scripts_longest_turn(scenario, smollm_tokenizer):
    """The gym test domain's opening is longer than the demo's 64-token cap: cut, the agent copied the cut into every
    later turn (docs/results.md). The cap is raised to the tokens the rehearsal trains for that turn, and kept where
    the script's turns fit (the restaurant's)."""
    from sead_ray.core.config import load_config
    from sead_ray.play.dialogue import Trajectory, Turn
    from sead_ray.scenario.profiles import Profile
    from sead_ray.scenario.scenario import load_scenario
    from sead_ray.training.warm_start import caps_holding, longest_script_turn_tokens, rehearsal_sample
    from tests.conftest import EMBEDDED_CONFIG, ROOT
    cfg = load_config(EMBEDDED_CONFIG)
    prefill = cfg.dialogue.agent_prefill
    gym = load_scenario(ROOT / "tests" / "data" / "third_domain" / "gym_renewal.yaml")
    tokens = longest_script_turn_tokens(gym, smollm_tokenizer, prefill)
    opening = Trajectory("d", Profile(gym.schema.middle, (), free_form=True),
                         [Turn(gym.rule_user.opening, None, "", True, 0, 0, user="Hello?", user_state=None)],
                         "success", "accept")
    assert tokens == sum(rehearsal_sample(opening, gym, smollm_tokenizer, 4096, prefill).loss_mask)
    assert tokens > cfg.dialogue.agent_eval.max_tokens == cfg.dialogue.agent_train.max_tokens == 64
    raised = caps_holding(cfg, tokens)
    assert (raised.dialogue.agent_train.max_tokens, raised.dialogue.agent_eval.max_tokens) == (tokens, tokens)
    assert raised.dialogue.user == cfg.dialogue.user and raised.train == cfg.train
    assert longest_script_turn_tokens(scenario, smollm_tokenizer, prefill) <= 64
    assert caps_holding(cfg, longest_script_turn_tokens(scenario, smollm_tokenizer, prefill)) is cfg
