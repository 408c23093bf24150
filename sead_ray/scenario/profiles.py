"""Profiles: an initial user state plus 1-3 behaviors, sampled consistently and without duplicates.

Pure functions over a numpy Generator, so the same seed always gives the same profiles.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from sead_ray.scenario.scenario import Behavior, Scenario
from sead_ray.scenario.state import State, StateSchema, state_key

log = logging.getLogger(__name__)


class ProfileSamplingError(ValueError):
    """The request cannot be met (N_max, the grid and the rules cannot supply it)."""


class ProfileFileError(ValueError):
    """A profiles file that cannot be used (the message names the file and line)."""


@dataclass(frozen=True)
class Profile:
    state: State
    behaviors: tuple[str, ...]
    # w/o Profile Sampling ablation: no structured initial state is given to the simulator.
    free_form: bool = False
    extra: Mapping[str, object] = field(default_factory=dict, compare=False, hash=False)
    # where the call starts (sead_ray.play.starts): None = the cold call (the paper), d >= 0 = the honest script
    # plays up to d turns before its final ask and the policy takes over
    start_depth: Optional[int] = None

    @property
    def key(self) -> tuple:
        return (self.state, frozenset(self.behaviors), self.free_form)

    def to_json(self, schema: StateSchema) -> dict:
        out: dict = schema.to_dict(self.state)
        out["behaviors"] = list(self.behaviors)
        if self.free_form:
            out["free_form"] = True
        if self.start_depth is not None:
            out["start_depth"] = self.start_depth
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, obj: Mapping, schema: StateSchema) -> Profile:
        """Parse a profile record; raises ValueError naming what is wrong."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"a profile must be a JSON object, got {type(obj).__name__}")
        state = schema.from_mapping(obj)
        behaviors = obj.get("behaviors", [])
        if not isinstance(behaviors, list) or not all(isinstance(b, str) for b in behaviors):
            raise ValueError("profile field 'behaviors' must be a list of strings")
        depth = obj.get("start_depth")
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
            raise ValueError(f"profile field 'start_depth' must be an integer >= 0 (or absent: a cold call), got {depth!r}")
        known = set(schema.names) | {"behaviors", "free_form", "start_depth"}
        extra = {k: v for k, v in obj.items() if k not in known}
        return cls(state, tuple(behaviors), bool(obj.get("free_form", False)), extra, depth)


def start_key(depth: Optional[int]) -> str:
    """A start as text (metrics, reports, curriculum files): 'cold' (start_depth None) or 'dK'."""
    return "cold" if depth is None else f"d{depth}"


def parse_start_key(key: str) -> Optional[int]:
    return None if key == "cold" else int(key.removeprefix("d"))


def _allowed_behaviors(scenario: Scenario, state: State) -> list[Behavior]:
    return [b for b in scenario.behaviors if not scenario.violated_rules(state, (b,))]


def _draw_behaviors(scenario: Scenario, pool: list[Behavior], state: State, k: int,
                    rng: np.random.Generator) -> tuple[Behavior, ...]:
    """k behaviors of `pool` (those allowed for this state), at most max_behaviors_per_category from
    one category."""
    order = rng.permutation(len(pool))
    chosen: list[Behavior] = []
    per_category: dict[str, int] = {}
    for i in order:
        b = pool[int(i)]
        if per_category.get(b.category, 0) >= scenario.max_behaviors_per_category:
            continue
        if scenario.violated_rules(state, tuple(chosen) + (b,)):
            continue
        chosen.append(b)
        per_category[b.category] = per_category.get(b.category, 0) + 1
        if len(chosen) == k:
            break
    # Library order, so that the same set always prints the same way.
    index = {b.text: i for i, b in enumerate(scenario.behaviors)}
    return tuple(sorted(chosen, key=lambda b: index[b.text]))


# a run of the paper's size draws ~12k; far more would only be a typo, discovered hours later (with
# curriculum.mode off nothing else bounds a draw: no N_max)
MAX_PROFILES = 1_000_000


def sampling_capacity(states: Sequence[State], draws: Mapping[State, int], n_max: int | None) -> int:
    """How many more profiles the states can supply before every one reaches N_max."""
    if n_max is None:
        return 1 << 62
    return sum(max(0, n_max - draws.get(s, 0)) for s in states)


def sample_profiles(
    scenario: Scenario,
    n: int,
    rng: np.random.Generator,
    *,
    state_weights: Mapping[State, float] | None = None,
    draws: Mapping[State, int] | None = None,
    n_max: int | None = None,
    min_behaviors: int = 1,
    max_behaviors: int = 3,
    dedup: bool = True,
    free_form: bool = False,
    behavior_range: Callable[[State], tuple[int, int]] | None = None,
) -> list[Profile]:
    """Draw n consistent profiles.

    States come from the scenario's allowed grid, uniformly or by `state_weights` (states with
    weight 0 are never drawn); a state already drawn `n_max` times over the run (`draws`, counted
    with this batch) is never drawn again. Within the batch no profile (state + behavior set) repeats
    when `dedup`. Raises ProfileSamplingError at once when the cap cannot supply n profiles.
    """
    if not 0 <= n <= MAX_PROFILES:
        raise ProfileSamplingError(f"cannot sample {n:,} profiles: 0 to {MAX_PROFILES:,} at a time")
    if not 0 <= min_behaviors <= max_behaviors:
        raise ProfileSamplingError(f"behaviors per profile: need 0 <= {min_behaviors} <= {max_behaviors}")
    counts = dict(draws or {})
    states = scenario.allowed_states()
    if state_weights is None:
        weights = np.ones(len(states))
    else:
        weights = np.array([max(0.0, float(state_weights.get(s, 0.0))) for s in states])
    live = [i for i, s in enumerate(states) if weights[i] > 0]
    capacity = sampling_capacity([states[i] for i in live], counts, n_max)
    if capacity < n:
        raise ProfileSamplingError(
            f"asked for {n} profiles but only {capacity} more can be drawn: {len(live)} drawable initial "
            f"states (of {len(scenario.schema.grid())} in the grid, {len(states)} allowed by the consistency "
            f"rules) with N_max = {n_max} draws each; lower the count or raise curriculum.n_max")

    profiles: list[Profile] = []
    seen: set = set()
    pools: dict[State, list[Behavior]] = {}
    attempts, max_attempts = 0, 50 * n + 1000
    while len(profiles) < n:
        attempts += 1
        if attempts > max_attempts:
            raise ProfileSamplingError(
                f"gave up after {max_attempts} draws with {len(profiles)} of {n} distinct profiles: the "
                f"behavior library and rules leave too few distinct combinations for these states")
        if n_max is not None:
            for i, s in enumerate(states):
                if counts.get(s, 0) >= n_max:
                    weights[i] = 0.0
        total = weights.sum()
        if total <= 0:
            raise ProfileSamplingError("every drawable state reached N_max during this batch")
        state = states[int(rng.choice(len(states), p=weights / total))]
        low, high = behavior_range(state) if behavior_range else (min_behaviors, max_behaviors)
        k = int(rng.integers(low, high + 1))
        if state not in pools:
            pools[state] = _allowed_behaviors(scenario, state)
        behaviors = _draw_behaviors(scenario, pools[state], state, k, rng)
        if len(behaviors) < low:
            continue
        profile = Profile(state, tuple(b.text for b in behaviors), free_form)
        if dedup and profile.key in seen:
            continue
        seen.add(profile.key)
        counts[state] = counts.get(state, 0) + 1
        profiles.append(profile)
    return profiles


def check_profile(scenario: Scenario, profile: Profile) -> list[str]:
    """Everything wrong with a profile against the scenario (empty list = consistent)."""
    problems = []
    known = {b.text: b for b in scenario.behaviors}
    unknown = [b for b in profile.behaviors if b not in known]
    if unknown:
        problems.append(f"behaviors not in the library: {unknown}")
    behaviors = tuple(known[b] for b in profile.behaviors if b in known)
    per_cat: dict[str, int] = {}
    for b in behaviors:
        per_cat[b.category] = per_cat.get(b.category, 0) + 1
    over = [c for c, k in per_cat.items() if k > scenario.max_behaviors_per_category]
    if over:
        problems.append(f"more than {scenario.max_behaviors_per_category} behavior(s) from {over}")
    for rule in scenario.violated_rules(profile.state, behaviors):
        problems.append(f"violates rule '{rule.name}' ({rule.reason}) at state {state_key(profile.state)}")
    return problems


def read_profiles(path: str | Path, scenario: Scenario) -> list[Profile]:
    """Profiles from a JSONL file (as `sead-ray profiles sample` writes them); errors (a bad record, a
    behavior the scenario does not know) name the line, inconsistencies with the scenario are logged."""
    from sead_ray.core.jsonl import read_jsonl
    profiles = []
    library = {b.text for b in scenario.behaviors}
    for lineno, value in read_jsonl(path, ProfileFileError, "profiles", allow_nan=False):
        try:
            profile = Profile.from_json(value, scenario.schema)
        except ValueError as exc:
            raise ProfileFileError(f"{path}:{lineno}: bad profile: {exc}") from None
        unknown = [b for b in profile.behaviors if b not in library]
        if unknown:   # the simulator would play a behavior this scenario never defined (another scenario's file?)
            raise ProfileFileError(f"{path}:{lineno}: behavior(s) not in the library of scenario "
                                   f"{scenario.name!r}: {unknown}")
        # Rule violations stay warnings: a user may replay such profiles on purpose (a stress set, or a
        # set drawn before the scenario's rules changed), and every behavior is still one the simulator knows.
        for problem in check_profile(scenario, profile):
            log.warning("%s:%d: %s", path, lineno, problem)
        profiles.append(profile)
    if not profiles:
        raise ProfileFileError(f"{path}: no profiles")
    return profiles
