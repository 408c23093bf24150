"""ProfileControllerActor: owns the curriculum state (sampling distribution, counts, N_max, RNG).

`sample` and `update` return the state they leave with their result, so the driver always holds the
state of the last call: a controller that dies is replaced from it without losing or redoing a draw."""
from __future__ import annotations

from typing import Optional

import ray

from sead_ray.core.config_schema import CurriculumConfig
from sead_ray.curriculum.controller import ProfileController
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario


@ray.remote(num_cpus=0)
class ProfileControllerActor:
    def __init__(self, scenario: Scenario, curriculum: CurriculumConfig, seed: int):
        self.controller = ProfileController(scenario, curriculum, seed)

    def sample(self, n: int) -> tuple[list[Profile], dict]:
        return self.controller.sample(n), self.controller.state_dict()

    def update(self, outcomes: list[tuple[tuple[int, ...], Optional[int], bool]]) -> tuple[dict, dict]:
        return self.controller.update(outcomes), self.controller.state_dict()

    def snapshot(self) -> dict:
        return self.controller.snapshot()

    def state_dict(self) -> dict:
        return self.controller.state_dict()

    def load_state_dict(self, data: dict) -> None:
        self.controller.load_state_dict(data)
