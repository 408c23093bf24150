import math

import numpy as np
import pytest

from sead_ray.curriculum.mistake_analysis import (
    CurriculumState,
    band,
    band_fractions,
    completion_rate,
    completion_rate_by_state,
    curriculum_snapshot,
    sampling_entropy,
    sampling_weights,
)
from sead_ray.scenario.profiles import sample_profiles

A, B, C, D = (0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)
STATES = [A, B, C, D]


def _state(outcomes):
    cs = CurriculumState()
    cs.record_outcomes(outcomes)
    return cs


def test_completion_rate_and_bands():
    cs = _state([(A, True), (A, True), (A, False), (B, False), (C, True)])
    crs = completion_rate_by_state(cs, STATES)
    assert crs == {A: pytest.approx(2 / 3), B: 0.0, C: 1.0, D: None}
    assert [band(crs[s]) for s in STATES] == ["too_easy", "too_hard", "too_easy", "unseen"]
    assert band(0.6) == "ideal" and band(0.4) == "ideal" and band(0.61) == "too_easy" and band(0.39) == "too_hard"
    assert band_fractions(crs) == {"too_easy": 0.5, "ideal": 0.0, "too_hard": 0.25, "unseen": 0.25}


def test_paper_weights():
    cs = _state([(A, True), (A, False), (B, False), (C, True), (C, True), (C, True), (C, False)])
    w = sampling_weights(cs, STATES, "paper")
    assert w[A] == pytest.approx(1.0)        # CR 0.5: golden
    assert w[B] == pytest.approx(0.5)        # CR 0
    assert w[C] == pytest.approx(0.75)       # CR 0.75
    assert w[D] == pytest.approx(1.0)        # unseen: explored with the top weight


def test_first_iteration_is_uniform_in_every_mode():
    for mode in ("paper", "uniform", "marginal", "off"):
        w = sampling_weights(CurriculumState(), STATES, mode, n_max=5)
        assert set(w.values()) == {1.0}, mode
    assert sampling_entropy({s: 1.0 for s in STATES}) == pytest.approx(math.log(4))


def test_uniform_ignores_outcomes_but_keeps_n_max():
    cs = _state([(A, True)] * 5)
    cs.record_draws([A] * 5)
    assert sampling_weights(cs, STATES, "uniform", n_max=10) == {s: 1.0 for s in STATES}
    w = sampling_weights(cs, STATES, "uniform", n_max=5)
    assert w[A] == 0.0 and w[B] == 1.0
    # off: no controller, no cap
    assert sampling_weights(cs, STATES, "off", n_max=5)[A] == 1.0


def test_capped_states_are_never_drawn_in_paper_mode():
    cs = CurriculumState()
    cs.record_draws([A, A])
    w = sampling_weights(cs, STATES, "paper", n_max=2)
    assert w[A] == 0.0


def test_marginal_weights_are_products_of_level_weights():
    # dimension 0: level 0 states A, C; level 1 states B, D
    cs = _state([(A, True), (C, True), (B, True), (B, False), (D, True), (D, False)])
    w = sampling_weights(cs, STATES, "marginal")
    # dim0 level0 CR 1 -> 0.5; level1 CR 0.5 -> 1. dim1 level0 (A,B) CR 2/3 -> 5/6; level1 (C,D) 2/3 -> 5/6.
    # dim2: every state at level 0, pooled CR 4/6 -> 5/6.
    assert w[A] == pytest.approx(0.5 * 5 / 6 * 5 / 6)
    assert w[B] == pytest.approx(1.0 * 5 / 6 * 5 / 6)
    assert w[D] == pytest.approx(1.0 * 5 / 6 * 5 / 6)


def test_beta_smoothing_keeps_one_lucky_dialogue_from_locking_a_state_out():
    cs = _state([(A, True)])
    assert band(completion_rate_by_state(cs, [A])[A]) == "too_easy"
    smoothed = completion_rate_by_state(cs, [A], "beta", beta_prior=2.0)[A]
    assert smoothed == pytest.approx(2 / 3)
    assert completion_rate(1, 1, "beta", beta_prior=8.0) == pytest.approx(5 / 9)
    assert band(completion_rate(1, 1, "beta", beta_prior=8.0)) == "ideal"
    w_none = sampling_weights(cs, [A], "paper")[A]
    w_beta = sampling_weights(cs, [A], "paper", smoothing="beta", beta_prior=8.0)[A]
    assert w_beta > w_none
    with pytest.raises(ValueError):
        completion_rate(1, 1, "laplace")


def test_state_round_trips_through_json():
    cs = _state([(A, True), (B, False)])
    cs.record_draws([A, B, B])
    again = CurriculumState.from_json(cs.to_json())
    assert again == cs


def test_weights_steer_sampling_toward_golden_states(scenario):
    states = scenario.allowed_states()
    golden, easy = states[0], states[1]
    cs = _state([(golden, True), (golden, False)] * 5 + [(easy, True)] * 10)
    w = sampling_weights(cs, [golden, easy], "paper")
    profiles = sample_profiles(scenario, 300, np.random.default_rng(0), state_weights=w)
    share = sum(p.state == golden for p in profiles) / 300
    assert share == pytest.approx(2 / 3, abs=0.08)


def test_snapshot_lists_every_state():
    cs = _state([(A, True), (A, False)])
    snap = curriculum_snapshot(cs, STATES, sampling_weights(cs, STATES, "paper"))
    assert set(snap["states"]) == {"0-0-0", "1-0-0", "0-1-0", "1-1-0"}
    assert snap["states"]["0-0-0"] == {"cr": 0.5, "cr_smoothed": None, "attempts": 2, "successes": 1,
                                       "draws": 0, "band": "ideal", "weight": 1.0}


# -- starts deeper into the call (curriculum.depth: reverse): cells (state, depth)

def test_an_unseen_cell_takes_its_depths_cr_and_n_max_caps_each_cell():
    from sead_ray.curriculum.mistake_analysis import StartCells, cell_weights
    cells = StartCells()
    cells.record_outcomes([(A, 0, True)] * 4 + [(B, None, True), (B, None, False)])
    w = cell_weights(cells, [A, B], [0, None], "paper")
    assert w[(A, 0)] == pytest.approx(0.5)           # CR 1: too easy
    assert w[(B, 0)] == pytest.approx(0.5)           # unseen: depth 0's pooled CR (1.0)
    assert w[(B, None)] == pytest.approx(1.0)        # CR 0.5: golden
    assert w[(A, None)] == pytest.approx(1.0)        # unseen: cold's pooled CR (0.5)
    cells.record_draw(A, None)
    cells.record_draw(A, None)
    capped = cell_weights(cells, [A, B], [0, None], "paper", n_max=2)
    assert capped[(A, None)] == 0.0 and capped[(A, 0)] > 0 and capped[(B, None)] > 0
    assert cell_weights(StartCells(), [A], [0, None], "uniform") == {(A, 0): 1.0, (A, None): 1.0}
    assert StartCells.from_json(cells.to_json()) == cells


def test_as_the_starts_near_the_ask_become_easy_the_mass_moves_to_the_cold_call(scenario):
    from sead_ray.core.config_schema import CurriculumConfig
    from sead_ray.curriculum.controller import ProfileController
    controller = ProfileController(scenario, CurriculumConfig(depth="reverse", depths=(0, 1), user_set="soft"), 0)
    assert controller.depths == [0, 1, None]
    first = controller.sample(6)
    assert {p.start_depth for p in first} <= {0, 1, None}
    before = controller.snapshot()["depths"]
    assert before["cold"]["share"] == pytest.approx(1 / 3)        # nothing played yet: every depth alike
    state = first[0].state
    # depth 0 and 1 won every time, cold half the time
    controller.update([(state, 0, True)] * 6 + [(state, 1, True)] * 6 + [(state, None, True), (state, None, False)])
    after = controller.snapshot()["depths"]
    assert after["cold"]["share"] > 0.49 and after["d0"]["band"] == "too_easy" and after["cold"]["band"] == "ideal"
    assert after["d0"]["cr"] == 1.0 and after["cold"]["attempts"] == 2
    # resumable: the cells and the RNG travel in the state dict, the next draws are the same
    clone = ProfileController(scenario, CurriculumConfig(depth="reverse", depths=(0, 1), user_set="soft"), 99)
    clone.load_state_dict(controller.state_dict())
    assert [(p.state, p.start_depth) for p in clone.sample(5)] == [(p.state, p.start_depth) for p in controller.sample(5)]


def test_under_reverse_n_max_caps_each_cell_not_each_state(scenario):
    from sead_ray.core.config_schema import CurriculumConfig
    from sead_ray.curriculum.controller import ProfileController
    cfg = CurriculumConfig(depth="reverse", depths=(0,), user_set="soft", n_max=1, mode="uniform")
    controller = ProfileController(scenario, cfg, 0)
    cells = len(controller.states) * 2
    drawn = [(p.state, p.start_depth) for _ in range(cells // 2) for p in controller.sample(2)]
    assert len(drawn) == cells and len(set(drawn)) == cells      # every cell once, none twice


def test_several_user_sets_draw_together_each_profile_with_its_own_sets_behaviors(scenario):
    from sead_ray.core.config import ConfigError
    from sead_ray.core.config_schema import CurriculumConfig
    from sead_ray.curriculum.controller import ProfileController
    soft, hard = scenario.user_sets["soft"], scenario.user_sets["hard"]
    both = ProfileController(scenario, CurriculumConfig(user_set="soft,hard", mode="uniform"), 0)
    assert set(both.states) == set(scenario.allowed_states("soft")) | set(scenario.allowed_states("hard"))
    drawn = both.sample(60)
    by_set = {name: [p for p in drawn if p.extra["user_set"] == name] for name in ("soft", "hard")}
    assert by_set["soft"] and by_set["hard"] and len(drawn) == 60
    for user_set in (soft, hard):
        for p in by_set[user_set.name]:
            assert user_set.contains(scenario.schema, p.state)
            assert user_set.behaviors[0] <= len(p.behaviors) <= user_set.behaviors[1]
    # a state both sets hold is the first named set's
    shared = [s for s in both.states if soft.contains(scenario.schema, s) and hard.contains(scenario.schema, s)]
    assert all(scenario.user_set_of(s, "hard,soft") is hard for s in shared)
    with pytest.raises(ConfigError, match="no user set 'medium'"):
        ProfileController(scenario, CurriculumConfig(user_set="soft,medium"), 0)
