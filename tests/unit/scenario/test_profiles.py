import numpy as np
import pytest

from sead_ray.scenario.profiles import Profile, ProfileSamplingError, check_profile, sample_profiles


def test_sample_is_distinct_consistent_and_seeded(scenario):
    a = sample_profiles(scenario, 60, np.random.default_rng(7), n_max=200)
    b = sample_profiles(scenario, 60, np.random.default_rng(7), n_max=200)
    assert [p.to_json(scenario.schema) for p in a] == [p.to_json(scenario.schema) for p in b]
    assert len({p.key for p in a}) == 60
    allowed = set(scenario.allowed_states())
    for p in a:
        assert p.state in allowed
        assert 1 <= len(p.behaviors) <= 3
        assert check_profile(scenario, p) == []
    c = sample_profiles(scenario, 60, np.random.default_rng(8), n_max=200)
    assert [p.key for p in a] != [p.key for p in c]


def test_uniform_first_draw_covers_the_grid(scenario):
    profiles = sample_profiles(scenario, 2000, np.random.default_rng(0), n_max=200)
    counts = {}
    for p in profiles:
        counts[p.state] = counts.get(p.state, 0) + 1
    allowed = scenario.allowed_states()
    assert set(counts) == set(allowed)
    expected = 2000 / len(allowed)
    assert max(counts.values()) < 2 * expected and min(counts.values()) > expected / 2


def test_weighted_sampling_follows_weights(scenario):
    states = scenario.allowed_states()
    heavy, light = states[0], states[1]
    weights = {heavy: 9.0, light: 1.0}
    profiles = sample_profiles(scenario, 400, np.random.default_rng(1), state_weights=weights)
    n_heavy = sum(p.state == heavy for p in profiles)
    assert {p.state for p in profiles} == {heavy, light}
    assert 0.8 < n_heavy / 400 < 0.97


def test_n_max_caps_draws_over_the_run(scenario):
    states = scenario.allowed_states()
    target = states[5]
    draws = {s: 3 for s in states}
    draws[target] = 0
    profiles = sample_profiles(scenario, 3, np.random.default_rng(0), draws=draws, n_max=3)
    assert [p.state for p in profiles] == [target] * 3
    with pytest.raises(ProfileSamplingError, match="only 3 more can be drawn"):
        sample_profiles(scenario, 4, np.random.default_rng(0), draws=draws, n_max=3)


def test_impossible_request_fails_fast(scenario):
    with pytest.raises(ProfileSamplingError, match="asked for 100000 profiles"):
        sample_profiles(scenario, 100000, np.random.default_rng(0), n_max=200)


def test_rules_on_behaviors_are_enforced(scenario):
    # trust 5 forbids Trust_and_Skepticism behaviors in the default scenario
    trusting = [s for s in scenario.allowed_states() if s[2] == 5]
    weights = {s: 1.0 for s in trusting}
    skeptic = {b.text for b in scenario.behaviors if b.category == "Trust_and_Skepticism"}
    for p in sample_profiles(scenario, 200, np.random.default_rng(3), state_weights=weights):
        assert not skeptic & set(p.behaviors)
    bad = Profile((2, 2, 5), (sorted(skeptic)[0],))
    assert any("trusting_owner_doubting_everything" in msg for msg in check_profile(scenario, bad))
    two_cost = tuple(b.text for b in scenario.behaviors if b.category == "Cost_Concerns")[:2]
    assert any("more than 1 behavior" in msg for msg in check_profile(scenario, Profile((2, 2, 2), two_cost)))
    assert check_profile(scenario, Profile((2, 2, 2), ("made up",)))[0].startswith("behaviors not in the library")


def test_profile_json_round_trip(schema):
    p = Profile((1, 2, 3), ("Asks if a deposit is required",))
    obj = p.to_json(schema)
    assert obj == {"cooperation": 1, "emotion": 2, "trust": 3, "behaviors": ["Asks if a deposit is required"]}
    assert Profile.from_json(obj, schema) == p
    with pytest.raises(ValueError, match="trust"):
        Profile.from_json({"cooperation": 1, "emotion": 2, "trust": 9, "behaviors": []}, schema)
