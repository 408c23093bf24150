"""Ray custom metrics of the roles: Gauges named `sead_<name>` (Prometheus shows them as
`ray_sead_<name>`; the names and units are listed in the README's "Monitoring" section and used by the
Grafana dashboard, sead_ray/dashboard.py)."""
from __future__ import annotations


class RayGauges:
    """Gauges made on first use, each with the tag keys of its first `set` (Ray fixes them at creation)."""

    def __init__(self) -> None:
        self._gauges: dict = {}

    def set(self, name: str, value: float, tags: dict[str, str]) -> None:
        from ray.util.metrics import Gauge
        gauge = self._gauges.get(name)
        if gauge is None:
            gauge = self._gauges[name] = Gauge(f"sead_{name}", description=f"sead-ray {name}",
                                               tag_keys=tuple(sorted(tags)))
        gauge.set(float(value), tags=tags)
