"""The Ray cluster a command runs on: connect to the configured one or start a local one."""
from __future__ import annotations

from sead_ray.core.config import SeadConfig


def connect(cfg: SeadConfig) -> dict:
    """Connect to the configured Ray cluster or start a local one; returns its resources."""
    from actors.ray_cluster import init_ray
    return init_ray(cfg)
