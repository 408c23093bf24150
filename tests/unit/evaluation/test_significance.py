"""sead_ray.evaluation.significance against literal values computed independently (Wilson by bisection on the score
equation, Fisher by enumerating every group-2 subset, McNemar by hand), plus edge cases and sanity checks."""
from __future__ import annotations

import math

import pytest

from sead_ray.evaluation.significance import (
    SuccessRate,
    _percentile,
    bootstrap_diff_interval,
    fisher_exact_greater,
    format_verdict,
    learning_verdict,
    mcnemar_exact_greater,
    success_rate,
    wilson_interval,
)


def bools(k: int, n: int) -> list[bool]:
    return [True] * k + [False] * (n - k)


# --- Wilson ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, n, low, high", [
    (7, 24, 0.14914648196960872, 0.49167693664496637),
    (5, 24, 0.09244825352851854, 0.40470453253188665),
    (14, 24, 0.38834665865228757, 0.7553239739018824),
    (1, 2, 0.09453120573423071, 0.9054687942657693),
    (0, 10, 0.0, 0.27753279986288926),   # the textbook 0/10 -> [0, 0.2775]
    (10, 10, 0.7224672001371109, 1.0),
])
def test_wilson_literal_values(k, n, low, high):
    got_low, got_high = wilson_interval(k, n)
    assert got_low == pytest.approx(low, rel=1e-9, abs=1e-12)
    assert got_high == pytest.approx(high, rel=1e-9, abs=1e-12)


def test_wilson_edges_and_validation():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    for k, n in [(-1, 5), (6, 5), (0, -1)]:
        with pytest.raises(ValueError, match="0 <= k <= n"):
            wilson_interval(k, n)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=1.0)


def test_wilson_contains_rate_narrows_with_n_and_widens_with_confidence():
    widths = []
    for n in (10, 40, 160, 640):
        low, high = wilson_interval(3 * n // 10, n)
        assert low < 0.3 < high
        widths.append(high - low)
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 4
    low90, high90 = wilson_interval(7, 24, confidence=0.90)
    low99, high99 = wilson_interval(7, 24, confidence=0.99)
    assert low99 < low90 < 7 / 24 < high90 < high99


# --- Fisher ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("k1, n1, k2, n2, p", [
    (1, 10, 6, 10, 0.02863777089783282),   # 37/1292
    (1, 4, 3, 4, 0.24285714285714285),     # 17/70
    (3, 8, 3, 8, 0.6958041958041958),      # 199/286: equal groups, far from significant
    (0, 5, 5, 5, 0.003968253968253968),    # 1/252 = 1/C(10,5)
    (6, 10, 1, 10, 0.9984520123839009),    # 645/646: a drop is not a gain
    (5, 24, 14, 24, 0.00856380661316327),  # 4069588/475207835
])
def test_fisher_literal_values(k1, n1, k2, n2, p):
    assert fisher_exact_greater(k1, n1, k2, n2) == pytest.approx(p, rel=1e-9)


def test_fisher_edges_and_validation():
    assert fisher_exact_greater(0, 0, 0, 0) == 1.0
    assert fisher_exact_greater(0, 5, 0, 5) == 1.0   # nothing observed after: no evidence
    assert fisher_exact_greater(3, 5, 0, 0) == 1.0
    for args in [(4, 3, 1, 3), (1, 3, -1, 3), (1, 3, 4, 3), (0, -1, 0, 2)]:
        with pytest.raises(ValueError, match="0 <= k <= n"):
            fisher_exact_greater(*args)


def test_fisher_monotone_in_after_successes():
    ps = [fisher_exact_greater(3, 12, k2, 12) for k2 in range(13)]
    assert ps == sorted(ps, reverse=True) and ps[0] == pytest.approx(1.0)


# --- bootstrap ------------------------------------------------------------------------------------

def test_bootstrap_deterministic_for_seed():
    # small, unequal groups and few resamples, so the percentiles land between lattice points and move with the seed
    before, after = bools(3, 13), bools(9, 17)
    first = bootstrap_diff_interval(before, after, n_boot=200, seed=7)
    assert first == bootstrap_diff_interval(before, after, n_boot=200, seed=7)
    assert first != bootstrap_diff_interval(before, after, n_boot=200, seed=8)


def test_bootstrap_diff_and_interval_near_normal_approximation():
    diff, low, high = bootstrap_diff_interval(bools(5, 24), bools(14, 24), n_boot=4000)
    assert diff == pytest.approx(14 / 24 - 5 / 24)
    # Wald: 0.375 +- 1.96 * sqrt(5/24*19/24/24 + 14/24*10/24/24) = [0.120, 0.630]
    assert low < diff < high
    assert low == pytest.approx(0.120, abs=0.05) and high == pytest.approx(0.630, abs=0.05)


def test_bootstrap_percentiles_match_exact_bootstrap_quantiles():
    # The bootstrap difference is Bin(200, 0.5)/200 - Bin(200, 0.2)/200; its exact 2.5% / 97.5% quantiles,
    # by convolving the two pmfs with fractions, are 0.21 / 0.39 (5% / 95%: 0.225 / 0.375)
    diff, low, high = bootstrap_diff_interval(bools(40, 200), bools(100, 200), n_boot=5000)
    assert diff == pytest.approx(0.3)
    assert low == pytest.approx(0.21, abs=0.0075) and high == pytest.approx(0.39, abs=0.0075)
    _, low90, high90 = bootstrap_diff_interval(bools(40, 200), bools(100, 200), confidence=0.90, n_boot=5000)
    assert low90 == pytest.approx(0.225, abs=0.0075) and high90 == pytest.approx(0.375, abs=0.0075)


def test_percentile_interpolates_like_numpy_linear():
    assert _percentile([0.0, 10.0], 0.975) == pytest.approx(9.75)
    assert _percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert _percentile([1.0, 2.0, 3.0, 4.0], 0.25) == pytest.approx(1.75)
    assert _percentile([2.0, 7.0], 0.0) == 2.0 and _percentile([2.0, 7.0], 1.0) == 7.0
    assert _percentile([4.0], 0.3) == 4.0


def test_bootstrap_constant_groups_and_validation():
    assert bootstrap_diff_interval([0, 0, 0], [1, 1], n_boot=50) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="both groups"):
        bootstrap_diff_interval([], [1])
    with pytest.raises(ValueError, match="both groups"):
        bootstrap_diff_interval([1], [])


# --- McNemar --------------------------------------------------------------------------------------

def test_mcnemar_literal_values():
    concordant = [(True, True)] * 5 + [(False, False)] * 4
    # b = 6, c = 1: P(Bin(7, 1/2) >= 6) = (7 + 1) / 128
    assert mcnemar_exact_greater(concordant + [(False, True)] * 6 + [(True, False)]) == 0.0625
    # b = 9, c = 1: (10 + 1) / 1024
    assert mcnemar_exact_greater([(False, True)] * 9 + [(True, False)]) == 11 / 1024 == 0.0107421875
    # b = 1, c = 6: P(Bin(7, 1/2) >= 1) = 127 / 128
    assert mcnemar_exact_greater([(False, True)] + [(True, False)] * 6) == 127 / 128


def test_mcnemar_no_discordant_pairs():
    assert mcnemar_exact_greater([]) == 1.0
    assert mcnemar_exact_greater([(True, True), (False, False)]) == 1.0


# --- success rate, verdict ------------------------------------------------------------------------

def test_success_rate_str_and_fields():
    rate = success_rate(7, 24)
    assert str(rate) == "7/24 = 0.29 [0.15, 0.49]"
    assert rate.rate == pytest.approx(7 / 24)
    assert (rate.low, rate.high) == wilson_interval(7, 24)
    assert SuccessRate(0, 0, 0.0, 1.0).rate == 0.0


def test_verdict_no_gain_for_equal_groups():
    verdict = learning_verdict(bools(8, 24), bools(8, 24), n_boot=2000)
    assert verdict["gain"] is False
    assert verdict["diff"] == 0.0 and verdict["diff_low"] < 0 < verdict["diff_high"]
    assert verdict["p_one_sided"] > 0.5
    text = format_verdict(verdict)
    assert text.endswith(": no significant gain") and len(text.splitlines()) == 3


def test_verdict_gain_for_clear_improvement():
    verdict = learning_verdict(bools(5, 24), bools(14, 24), n_boot=4000)
    assert verdict["gain"] is True
    assert verdict["before"] == {"k": 5, "n": 24, "rate": 5 / 24, "low": pytest.approx(0.09244825352851854),
                                 "high": pytest.approx(0.40470453253188665)}
    assert verdict["after"]["k"] == 14 and verdict["after"]["n"] == 24
    assert verdict["p_one_sided"] == pytest.approx(0.00856380661316327, rel=1e-9)
    assert verdict["diff"] == pytest.approx(0.375) and verdict["diff_low"] > 0
    lines = format_verdict(verdict).splitlines()
    assert lines[0] == "before (first 2 iterations): 5/24 = 0.21 [0.09, 0.40]"
    assert lines[1] == "after (last 2 iterations): 14/24 = 0.58 [0.39, 0.76]"
    assert lines[2].startswith("gain +0.38 (95% bootstrap [")
    assert lines[2].endswith("]), one-sided exact p = 0.009: significant")


def test_verdict_needs_both_tests():
    # 1/3 -> 3/3: the bootstrap interval can sit above zero yet Fisher's p (0.2) is not below alpha
    verdict = learning_verdict(bools(1, 3), bools(3, 3), n_boot=2000)
    assert verdict["p_one_sided"] == pytest.approx(0.2) and verdict["gain"] is False
    # 5/24 -> 14/24 passes Fisher (p = 0.0086) but its 99.9% bootstrap interval reaches below zero
    verdict = learning_verdict(bools(5, 24), bools(14, 24), confidence=0.999, n_boot=4000)
    assert verdict["p_one_sided"] < 0.05 and verdict["diff_low"] <= 0 and verdict["gain"] is False
    assert "(99.9% bootstrap [" in format_verdict(verdict)
    # a drop is never a gain
    assert learning_verdict(bools(14, 24), bools(5, 24), n_boot=2000)["gain"] is False


def test_format_verdict_custom_labels_and_tiny_p():
    verdict = learning_verdict(bools(0, 30), bools(30, 30), n_boot=200)
    text = format_verdict(verdict, before_label="base", after_label="trained")
    assert text.startswith("base: 0/30 = 0.00 [0.00, 0.11]\ntrained: 30/30 = 1.00 [0.89, 1.00]\n")
    p = verdict["p_one_sided"]
    assert p == pytest.approx(1 / math.comb(60, 30), rel=1e-9)
    assert f"p = {p:.1e}: significant" in text
