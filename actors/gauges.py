"""Ray custom metrics of the roles: Gauges named `sead_<name>` (Prometheus shows them as
`ray_sead_<name>`; the names and units are listed in docs/cluster.md's "Monitoring" section and used by the
Grafana dashboard, sead_ray/ops/dashboard.py)."""
from __future__ import annotations

import threading


class RayGauges:
    """Gauges made on first use, each with the tag keys of its first `set` (Ray fixes them at creation).

    Ray's metrics agent forgets a gauge value that was not reported again within two export intervals,
    and a figure set once per iteration would vanish from Prometheus minutes before the next one: every
    value set is set again every `keepalive_s` seconds, from a daemon thread, while the process lives."""

    def __init__(self, keepalive_s: float = 4.0) -> None:
        self._gauges: dict = {}
        self._last: dict[tuple, tuple[str, float, dict]] = {}
        self._lock = threading.Lock()
        self._keepalive_s = keepalive_s
        self._thread = None

    def set(self, name: str, value: float, tags: dict[str, str]) -> None:
        with self._lock:
            self._set(name, float(value), tags)
            self._last[(name, tuple(sorted(tags.items())))] = (name, float(value), dict(tags))
            if self._thread is None and self._keepalive_s > 0:
                self._thread = threading.Thread(target=self._keep_alive, name="sead-gauges", daemon=True)
                self._thread.start()

    def _set(self, name: str, value: float, tags: dict[str, str]) -> None:
        from ray.util.metrics import Gauge
        gauge = self._gauges.get(name)
        if gauge is None:
            gauge = self._gauges[name] = Gauge(f"sead_{name}", description=f"sead-ray {name}",
                                               tag_keys=tuple(sorted(tags)))
        gauge.set(value, tags=tags)

    def _keep_alive(self) -> None:
        event = threading.Event()
        while not event.wait(self._keepalive_s):
            with self._lock:
                for name, value, tags in self._last.values():
                    self._set(name, value, tags)
