"""The Profile Controller as a plain object: the sampling distribution, N_max counts, and its RNG.

The ProfileControllerActor is a thin wrapper around it. Its whole state (curriculum counts and the
RNG state) is JSON-serialisable, so a resumed run draws exactly what the uninterrupted run would.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Optional

import numpy as np

from sead_ray.curriculum.mistake_analysis import CurriculumState, curriculum_snapshot, sampling_weights
from sead_ray.scenario.profiles import Profile, sample_profiles
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.state import State


class ProfileController:
    def __init__(self, scenario: Scenario, curriculum_cfg: Any, seed: int):
        self.scenario = scenario
        self.cfg = curriculum_cfg
        self.rng = np.random.default_rng(seed)
        self.state = CurriculumState()
        self.states = scenario.allowed_states(curriculum_cfg.user_set)
        user_set = scenario.user_sets.get(curriculum_cfg.user_set)
        self.behavior_counts = (user_set.behaviors if user_set
                                else (curriculum_cfg.min_behaviors, curriculum_cfg.max_behaviors))

    @property
    def n_max(self) -> Optional[int]:
        return None if self.cfg.mode == "off" else self.cfg.n_max

    def weights(self) -> dict[State, float]:
        return sampling_weights(self.state, self.states, self.cfg.mode, n_max=self.n_max,
                                smoothing=self.cfg.smoothing, beta_prior=self.cfg.beta_prior)

    def sample(self, n: int) -> list[Profile]:
        """Phase 1: n distinct consistent profiles from the current distribution (counted for N_max)."""
        profiles = sample_profiles(
            self.scenario, n, self.rng, state_weights=self.weights(), draws=self.state.draws, n_max=self.n_max,
            min_behaviors=self.behavior_counts[0], max_behaviors=self.behavior_counts[1],
            dedup=self.cfg.mode != "off", free_form=not self.cfg.profile_sampling)
        self.state.record_draws(p.state for p in profiles)
        if self.cfg.user_set:   # recorded with each dialogue, so that metrics can be split by set
            profiles = [replace(p, extra={**p.extra, "user_set": self.cfg.user_set}) for p in profiles]
        return profiles

    def update(self, outcomes: Iterable[tuple[State, bool]]) -> dict:
        """Phase 4 (Mistake Analysis): add outcomes per initial state; return the new snapshot."""
        self.state.record_outcomes(outcomes)
        return self.snapshot()

    def snapshot(self) -> dict:
        return curriculum_snapshot(self.state, self.states, self.weights(), self.cfg.smoothing, self.cfg.beta_prior,
                                   self.cfg.easy_above, self.cfg.hard_below)

    def state_dict(self) -> dict:
        return {"curriculum": self.state.to_json(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, data: dict) -> None:
        self.state = CurriculumState.from_json(data["curriculum"])
        self.rng.bit_generator.state = data["rng"]
