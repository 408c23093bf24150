"""Mistake Analysis: completion rate per initial state, bands, and the sampling weights.

Pure functions plus one small serialisable record (CurriculumState), owned at run time by the
ProfileControllerActor and checkpointed with the run.

Modes:
- `paper`:    w(s) = 1 - |CR(s) - 0.5| (the SEAD paper); unseen states get the top weight 1.
- `uniform`:  every drawable state weighs 1 (the "w/o Mistake Analysis" ablation); N_max holds.
- `marginal`: the reference code's way: each dimension's level gets 1 - |CR - 0.5| from the CR pooled
              over all states with that level, and a state weighs the product over its dimensions.
- `off`:      no controller at all: uniform, no N_max cap.
Smoothing `beta` replaces CR by the posterior mean under a Beta(k/2, k/2) prior, so a state seen once
with a lucky success is not locked out as "too easy".
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

from sead_ray.scenario.profiles import parse_start_key, start_key
from sead_ray.scenario.state import State, parse_state_key, state_key

BANDS = ("too_easy", "ideal", "too_hard", "unseen")


@dataclass
class CurriculumState:
    """Accumulated over a run; JSON-serialisable for checkpoints."""

    attempts: dict[State, int] = field(default_factory=dict)   # finished dialogues per initial state
    successes: dict[State, int] = field(default_factory=dict)
    draws: dict[State, int] = field(default_factory=dict)      # profiles sampled per state (N_max)

    def record_outcomes(self, outcomes: Iterable[tuple[State, bool]]) -> None:
        for state, success in outcomes:
            self.attempts[state] = self.attempts.get(state, 0) + 1
            self.successes[state] = self.successes.get(state, 0) + int(bool(success))

    def record_draws(self, states: Iterable[State]) -> None:
        for s in states:
            self.draws[s] = self.draws.get(s, 0) + 1

    def to_json(self) -> dict:
        return {name: {state_key(s): v for s, v in sorted(getattr(self, name).items())}
                for name in ("attempts", "successes", "draws")}

    @classmethod
    def from_json(cls, obj: Mapping) -> CurriculumState:
        return cls(**{name: {parse_state_key(k): int(v) for k, v in obj.get(name, {}).items()}
                      for name in ("attempts", "successes", "draws")})


def completion_rate(successes: int, attempts: int, smoothing: str = "none", beta_prior: float = 2.0) -> Optional[float]:
    """CR of one state; None when unseen (and not smoothed)."""
    if smoothing == "beta":
        a = beta_prior / 2.0
        if attempts + 2 * a == 0:
            return None
        return (successes + a) / (attempts + 2 * a)
    if smoothing != "none":
        raise ValueError(f"unknown smoothing {smoothing!r}")
    return successes / attempts if attempts else None


def completion_rate_by_state(cs: CurriculumState, states: Sequence[State], smoothing: str = "none",
                             beta_prior: float = 2.0) -> dict[State, Optional[float]]:
    out = {}
    for s in states:
        n = cs.attempts.get(s, 0)
        # An unseen state stays unseen under smoothing too: it is explored, not guessed at.
        out[s] = None if n == 0 else completion_rate(cs.successes.get(s, 0), n, smoothing, beta_prior)
    return out


def band(cr: Optional[float], easy_above: float = 0.6, hard_below: float = 0.4) -> str:
    if cr is None:
        return "unseen"
    if cr > easy_above:
        return "too_easy"
    if cr < hard_below:
        return "too_hard"
    return "ideal"


def paper_weight(cr: Optional[float]) -> float:
    return 1.0 if cr is None else 1.0 - abs(cr - 0.5)


def sampling_weights(
    cs: CurriculumState,
    states: Sequence[State],
    mode: str,
    *,
    n_max: Optional[int] = None,
    smoothing: str = "none",
    beta_prior: float = 2.0,
) -> dict[State, float]:
    """Unnormalised weight per state; 0 for states that reached N_max (never drawn)."""
    if mode in ("uniform", "off"):
        weights = {s: 1.0 for s in states}
    elif mode == "paper":
        crs = completion_rate_by_state(cs, states, smoothing, beta_prior)
        weights = {s: paper_weight(crs[s]) for s in states}
    elif mode == "marginal":
        weights = _marginal_weights(cs, states, smoothing, beta_prior)
    else:
        raise ValueError(f"unknown curriculum mode {mode!r}")
    if mode != "off" and n_max is not None:
        weights = {s: (0.0 if cs.draws.get(s, 0) >= n_max else w) for s, w in weights.items()}
    return weights


def _marginal_weights(cs: CurriculumState, states: Sequence[State], smoothing: str, beta_prior: float) -> dict[State, float]:
    if not states:
        return {}
    n_dims = len(states[0])
    level_weight: list[dict[int, float]] = []
    for d in range(n_dims):
        pooled: dict[int, list[int]] = {}
        for s in states:
            acc = pooled.setdefault(s[d], [0, 0])
            acc[0] += cs.successes.get(s, 0)
            acc[1] += cs.attempts.get(s, 0)
        level_weight.append({lvl: paper_weight(None if n == 0 else completion_rate(k, n, smoothing, beta_prior))
                             for lvl, (k, n) in pooled.items()})
    return {s: math.prod(level_weight[d][s[d]] for d in range(n_dims)) for s in states}


def sampling_entropy(weights: Mapping[State, float]) -> float:
    """Shannon entropy (nats) of the normalised sampling distribution; log(#states) when uniform."""
    total = sum(weights.values())
    if total <= 0:
        return 0.0
    return -sum((w / total) * math.log(w / total) for w in weights.values() if w > 0)


def band_fractions(crs: Mapping[State, Optional[float]], easy_above: float = 0.6,
                   hard_below: float = 0.4) -> dict[str, float]:
    """Share of states in each band (unseen included), for dashboards."""
    counts = {b: 0 for b in BANDS}
    for cr in crs.values():
        counts[band(cr, easy_above, hard_below)] += 1
    total = max(1, len(crs))
    return {b: counts[b] / total for b in BANDS}


def curriculum_snapshot(cs: CurriculumState, states: Sequence[State], weights: Mapping[State, float],
                        smoothing: str = "none", beta_prior: float = 2.0,
                        easy_above: float = 0.6, hard_below: float = 0.4) -> dict:
    """What `curriculum/iter_NNNN.json` holds: CR, counts, band and next weight per state."""
    crs = completion_rate_by_state(cs, states, smoothing, beta_prior)
    raw = completion_rate_by_state(cs, states, "none")
    per_state = {}
    for s in states:
        per_state[state_key(s)] = {
            "cr": raw[s], "cr_smoothed": crs[s] if smoothing != "none" else None,
            "attempts": cs.attempts.get(s, 0), "successes": cs.successes.get(s, 0),
            "draws": cs.draws.get(s, 0), "band": band(crs[s], easy_above, hard_below),
            "weight": weights.get(s, 0.0),
        }
    return {"states": per_state, "band_fractions": band_fractions(crs, easy_above, hard_below),
            "sampling_entropy": sampling_entropy(weights)}


# --------------------------------------------------------------------------- starts deeper into the call

Depth = Optional[int]          # None: the cold call; d >= 0: the honest script's turns before its ask (play.starts)


@dataclass
class StartCells:
    """`curriculum.depth: reverse`: outcomes and draws per cell (initial state, start depth), JSON-serialisable."""

    attempts: dict[tuple[State, Depth], int] = field(default_factory=dict)
    successes: dict[tuple[State, Depth], int] = field(default_factory=dict)
    draws: dict[tuple[State, Depth], int] = field(default_factory=dict)

    def record_outcomes(self, outcomes: Iterable[tuple[State, Depth, bool]]) -> None:
        for state, depth, success in outcomes:
            cell = (state, depth)
            self.attempts[cell] = self.attempts.get(cell, 0) + 1
            self.successes[cell] = self.successes.get(cell, 0) + int(bool(success))

    def record_draw(self, state: State, depth: Depth) -> None:
        self.draws[(state, depth)] = self.draws.get((state, depth), 0) + 1

    def draws_by_state(self) -> dict[State, int]:
        by_state: dict[State, int] = {}
        for (state, _), n in self.draws.items():
            by_state[state] = by_state.get(state, 0) + n
        return by_state

    def by_depth(self, depths: Sequence[Depth]) -> dict[Depth, tuple[int, int]]:
        """(successes, attempts) per depth, pooled over initial states."""
        pooled = {d: [0, 0] for d in depths}
        for (state, depth), n in self.attempts.items():
            if depth in pooled:
                pooled[depth][0] += self.successes.get((state, depth), 0)
                pooled[depth][1] += n
        return {d: (k, n) for d, (k, n) in pooled.items()}

    def to_json(self) -> dict:
        return {name: {f"{state_key(s)}@{start_key(d)}": v for (s, d), v in getattr(self, name).items()}
                for name in ("attempts", "successes", "draws")}

    @classmethod
    def from_json(cls, obj: Mapping) -> StartCells:
        def cell(key: str) -> tuple[State, Depth]:
            state, depth = key.split("@")
            return parse_state_key(state), parse_start_key(depth)
        return cls(**{name: {cell(k): int(v) for k, v in obj.get(name, {}).items()}
                      for name in ("attempts", "successes", "draws")})


def cell_weights(cells: StartCells, states: Sequence[State], depths: Sequence[Depth], mode: str, *,
                 n_max: Optional[int] = None, smoothing: str = "none", beta_prior: float = 2.0
                 ) -> dict[tuple[State, Depth], float]:
    """The paper's weight 1 - |CR - 0.5| per cell (state, depth); a cell not played yet takes its depth's CR pooled
    over states (a short run sees each cell a few times at most, each depth often), a depth not played yet weighs 1.
    So as the starts near the ask become too easy the mass moves back toward the cold call. A cell drawn N_max
    times weighs 0."""
    pooled = cells.by_depth(depths)
    weights = {}
    for s in states:
        for d in depths:
            if mode in ("uniform", "off"):
                w = 1.0
            else:
                n = cells.attempts.get((s, d), 0)
                k, n_depth = (cells.successes.get((s, d), 0), n) if n else pooled[d]
                w = paper_weight(completion_rate(k, n_depth, smoothing, beta_prior) if n_depth else None)
            weights[(s, d)] = 0.0 if mode != "off" and n_max is not None and cells.draws.get((s, d), 0) >= n_max else w
    return weights


def depth_snapshot(cells: StartCells, depths: Sequence[Depth], weights: Mapping[tuple[State, Depth], float],
                   easy_above: float = 0.6, hard_below: float = 0.4) -> dict:
    """CR, counts, band and share of the next draws per start depth (pooled over states): the frontier."""
    total = sum(weights.values()) or 1.0
    out = {}
    for d, (k, n) in cells.by_depth(depths).items():
        cr = k / n if n else None
        out[start_key(d)] = {"cr": cr, "attempts": n, "successes": k, "band": band(cr, easy_above, hard_below),
                             "draws": sum(v for (_, dd), v in cells.draws.items() if dd == d),
                             "share": sum(w for (_, dd), w in weights.items() if dd == d) / total}
    return out
