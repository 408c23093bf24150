"""ProfileControllerActor: owns the curriculum state (sampling distribution, counts, N_max, RNG)."""
from __future__ import annotations

import ray

from sead_ray.config import SeadConfig
from sead_ray.controller import ProfileController
from sead_ray.profiles import Profile
from sead_ray.scenario import load_scenario


@ray.remote(num_cpus=0)
class ProfileControllerActor:
    def __init__(self, cfg: SeadConfig):
        self.controller = ProfileController(load_scenario(cfg.resolve_path(cfg.scenario)), cfg.curriculum, cfg.seed)

    def sample(self, n: int) -> list[Profile]:
        return self.controller.sample(n)

    def update(self, outcomes: list[tuple[tuple[int, ...], bool]]) -> dict:
        return self.controller.update(outcomes)

    def snapshot(self) -> dict:
        return self.controller.snapshot()

    def state_dict(self) -> dict:
        return self.controller.state_dict()

    def load_state_dict(self, data: dict) -> None:
        self.controller.load_state_dict(data)
