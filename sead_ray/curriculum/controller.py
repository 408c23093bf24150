"""The Profile Controller as a plain object: the sampling distribution, N_max counts, and its RNG.

With `curriculum.depth: reverse` a start is a cell (initial state, start depth): the state is drawn by the sum of
its cells' weights, then its depth by the cell weights (together: a cell in proportion to its weight), and N_max
caps each cell (mistake_analysis.cell_weights).

The ProfileControllerActor is a thin wrapper around it. Its whole state (curriculum counts and the
RNG state) is JSON-serialisable, so a resumed run draws exactly what the uninterrupted run would.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Optional

import numpy as np

from sead_ray.curriculum.mistake_analysis import (
    CurriculumState,
    Depth,
    StartCells,
    cell_weights,
    curriculum_snapshot,
    depth_snapshot,
    sampling_weights,
)
from sead_ray.scenario.profiles import Profile, sample_profiles
from sead_ray.scenario.scenario import Scenario, UserSet
from sead_ray.scenario.state import State


class ProfileController:
    def __init__(self, scenario: Scenario, curriculum_cfg: Any, seed: int):
        self.scenario = scenario
        self.cfg = curriculum_cfg
        self.rng = np.random.default_rng(seed)
        self.state = CurriculumState()
        self.cells = StartCells()
        # the scripted starts, then the cold call (None); [None] alone: the paper
        self.depths: list[Depth] = ([*curriculum_cfg.depths, None] if curriculum_cfg.depth == "reverse"
                                    else [None])
        # one user set, several ("soft,hard": their states together, each profile its own set's behavior counts),
        # or the whole grid ('')
        self.states = scenario.allowed_states(curriculum_cfg.user_set)

    @property
    def n_max(self) -> Optional[int]:
        return None if self.cfg.mode == "off" else self.cfg.n_max

    @property
    def reverse(self) -> bool:
        return self.depths != [None]

    def weights(self) -> dict[State, float]:
        """Per initial state; under `depth: reverse` the sum of its cells' weights."""
        if self.reverse:
            by_state: dict[State, float] = {}
            for (state, _), w in self.cell_weights().items():
                by_state[state] = by_state.get(state, 0.0) + w
            return by_state
        return sampling_weights(self.state, self.states, self.cfg.mode, n_max=self.n_max,
                                smoothing=self.cfg.smoothing, beta_prior=self.cfg.beta_prior)

    def cell_weights(self) -> dict[tuple[State, Depth], float]:
        return cell_weights(self.cells, self.states, self.depths, self.cfg.mode, n_max=self.n_max,
                            smoothing=self.cfg.smoothing, beta_prior=self.cfg.beta_prior)

    def sample(self, n: int) -> list[Profile]:
        """Phase 1: n distinct consistent profiles from the current distribution (counted for N_max)."""
        draws, n_max = self.state.draws, self.n_max
        if self.reverse and n_max is not None:   # N_max caps each cell: a state has room for N_max per depth
            draws, n_max = self.cells.draws_by_state(), n_max * len(self.depths)
        profiles = sample_profiles(
            self.scenario, n, self.rng, state_weights=self.weights(), draws=draws, n_max=n_max,
            min_behaviors=self.cfg.min_behaviors, max_behaviors=self.cfg.max_behaviors,
            behavior_range=self._behavior_range if self.cfg.user_set else None,
            dedup=self.cfg.mode != "off", free_form=not self.cfg.profile_sampling)
        self.state.record_draws(p.state for p in profiles)
        if self.reverse:
            profiles = [replace(p, start_depth=self._draw_depth(p.state)) for p in profiles]
        if self.cfg.user_set:   # recorded with each dialogue, so that metrics can be split by set
            profiles = [replace(p, extra={**p.extra, "user_set": self._user_set(p.state).name}) for p in profiles]
        return profiles

    def _user_set(self, state: State) -> UserSet:
        user_set = self.scenario.user_set_of(state, self.cfg.user_set)
        assert user_set is not None, "a state outside the named user sets was drawn"
        return user_set

    def _behavior_range(self, state: State) -> tuple[int, int]:
        return self._user_set(state).behaviors

    def _draw_depth(self, state: State) -> Depth:
        """A drawn state's start depth, by its cells' weights (one cell of the state has weight > 0: it was drawn)."""
        weights = self.cell_weights()
        w = np.array([weights[(state, d)] for d in self.depths])
        depth = self.depths[int(self.rng.choice(len(self.depths), p=w / w.sum()))]
        self.cells.record_draw(state, depth)
        return depth

    def update(self, outcomes: Iterable[tuple[State, Depth, bool]]) -> dict:
        """Phase 4 (Mistake Analysis): add outcomes (initial state, start depth the call was played from, won)
        per initial state and, under `depth: reverse`, per cell; return the new snapshot."""
        outcomes = list(outcomes)
        self.state.record_outcomes((state, success) for state, _, success in outcomes)
        if self.reverse:
            self.cells.record_outcomes(outcomes)
        return self.snapshot()

    def snapshot(self) -> dict:
        snapshot = curriculum_snapshot(self.state, self.states, self.weights(), self.cfg.smoothing,
                                       self.cfg.beta_prior, self.cfg.easy_above, self.cfg.hard_below)
        if self.reverse:
            snapshot["depths"] = depth_snapshot(self.cells, self.depths, self.cell_weights(), self.cfg.easy_above,
                                                self.cfg.hard_below)
        return snapshot

    def state_dict(self) -> dict:
        return {"curriculum": self.state.to_json(), "rng": self.rng.bit_generator.state,
                **({"cells": self.cells.to_json()} if self.reverse else {})}

    def load_state_dict(self, data: dict) -> None:
        self.state = CurriculumState.from_json(data["curriculum"])
        self.cells = StartCells.from_json(data.get("cells", {}))
        self.rng.bit_generator.state = data["rng"]
