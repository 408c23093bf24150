"""Small-sample statistics for claiming learning honestly: with a few dozen dialogues per evaluation, a
raw success-rate difference is mostly noise, so every claim carries an interval and an exact p-value.

Pure stdlib (math, random, statistics) so it runs anywhere, including the report step, without scipy.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist


def _check_count(k: int, n: int, name: str = "") -> None:
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n for {name or 'a count'}, got k={k}, n={n}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k successes in n: unlike the normal (Wald) interval it stays inside
    [0, 1] and keeps its coverage at small n and at k = 0 or k = n. No data (n = 0) -> (0, 1)."""
    _check_count(k, n)
    _check_confidence(confidence)
    if n == 0:
        return (0.0, 1.0)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # k = 0 and k = n make one bound exact; clamp away float noise there
    return (0.0 if k == 0 else max(0.0, centre - half), 1.0 if k == n else min(1.0, centre + half))


def fisher_exact_greater(k1: int, n1: int, k2: int, n2: int) -> float:
    """One-sided Fisher exact p-value that group 2 (after, k2/n2) succeeds more often than group 1
    (before, k1/n1): P(X >= k2) with X hypergeometric given the table's margins. Exact at any n."""
    _check_count(k1, n1, "group 1")
    _check_count(k2, n2, "group 2")
    successes, total = k1 + k2, n1 + n2
    top = min(successes, n2)
    tail = sum(math.comb(successes, x) * math.comb(total - successes, n2 - x) for x in range(k2, top + 1))
    return tail / math.comb(total, n2)  # int / int: one correctly rounded division


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default 'linear' method)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_diff_interval(before: Sequence[int | bool], after: Sequence[int | bool], confidence: float = 0.95,
                            n_boot: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    """(mean(after) - mean(before), low, high): percentile bootstrap, each group resampled on its own
    (they are independent samples). Seeded, so a report is reproducible."""
    if not before or not after:
        raise ValueError(f"both groups need data, got {len(before)} before and {len(after)} after")
    _check_confidence(confidence)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = random.Random(seed)
    diff = sum(after) / len(after) - sum(before) / len(before)
    diffs = sorted(sum(rng.choices(after, k=len(after))) / len(after)
                   - sum(rng.choices(before, k=len(before))) / len(before) for _ in range(n_boot))
    tail = (1 - confidence) / 2
    return (diff, _percentile(diffs, tail), _percentile(diffs, 1 - tail))


def mcnemar_exact_greater(pairs: Sequence[tuple[bool, bool]]) -> float:
    """One-sided exact McNemar p-value that `second` succeeds more often than `first` on the same
    items (e.g. two agents on the same profiles): only discordant pairs carry evidence, and under H0
    each is equally likely to go either way, so P(Binomial(b + c, 1/2) >= b)."""
    b = sum(1 for first, second in pairs if not first and second)
    c = sum(1 for first, second in pairs if first and not second)
    m = b + c
    if m == 0:
        return 1.0
    return sum(math.comb(m, i) for i in range(b, m + 1)) / 2**m


@dataclass(frozen=True)
class SuccessRate:
    """k successes out of n with its Wilson interval [low, high]."""
    k: int
    n: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else 0.0

    def __str__(self) -> str:
        return f"{self.k}/{self.n} = {self.rate:.2f} [{self.low:.2f}, {self.high:.2f}]"


def success_rate(k: int, n: int, confidence: float = 0.95) -> SuccessRate:
    low, high = wilson_interval(k, n, confidence)
    return SuccessRate(k, n, low, high)


def learning_verdict(before: Sequence[bool], after: Sequence[bool], alpha: float = 0.05, confidence: float = 0.95,
                     n_boot: int = 10000, seed: int = 0) -> dict:
    """Before/after success rates, bootstrap difference and one-sided Fisher p. `gain` demands both
    the exact test (p < alpha) and a bootstrap interval above zero, so neither alone can claim it."""
    rates = {name: success_rate(sum(map(bool, group)), len(group), confidence)
             for name, group in (("before", before), ("after", after))}
    diff, diff_low, diff_high = bootstrap_diff_interval([bool(x) for x in before], [bool(x) for x in after],
                                                        confidence, n_boot, seed)
    p = fisher_exact_greater(rates["before"].k, rates["before"].n, rates["after"].k, rates["after"].n)
    verdict: dict = {name: {"k": r.k, "n": r.n, "rate": r.rate, "low": r.low, "high": r.high}
                     for name, r in rates.items()}
    verdict.update(diff=diff, diff_low=diff_low, diff_high=diff_high, p_one_sided=p,
                   gain=p < alpha and diff_low > 0, alpha=alpha, confidence=confidence)
    return verdict


def format_verdict(verdict: dict, before_label: str = "before (first 2 iterations)",
                   after_label: str = "after (last 2 iterations)", is_test: bool = True) -> str:
    """Three-line human summary of learning_verdict's result; `is_test` False: calls that are not like for like
    (training calls across a moving curriculum), shown with no verdict."""
    lines = [f"{label}: {SuccessRate(**{f: verdict[key][f] for f in ('k', 'n', 'low', 'high')})}"
             for label, key in ((before_label, "before"), (after_label, "after"))]
    p = verdict["p_one_sided"]
    p_text = f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
    level = f"{100 * verdict.get('confidence', 0.95):g}"
    outcome = ("significant" if verdict["gain"] else "no significant gain") if is_test else \
        "descriptive only (the curriculum moved the start mix: not a test of learning)"
    lines.append(f"gain {verdict['diff']:+.2f} ({level}% bootstrap [{verdict['diff_low']:.2f}, "
                 f"{verdict['diff_high']:.2f}]), one-sided exact p = {p_text}: {outcome}")
    return "\n".join(lines)
