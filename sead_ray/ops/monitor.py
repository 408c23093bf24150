"""`sead-ray monitor`: Prometheus (and Grafana where installed) for the Ray clusters of runs on this
machine, with Ray's own scrape configuration, bound to localhost.

Ray's dashboard keeps a Prometheus service-discovery file listing every node's metrics export port
(`<ray temp dir>/prom_metrics_service_discovery.json`, following the newest session); Prometheus reads
it, so one monitor follows run after run. Grafana gets a Prometheus data source, the sead-ray
dashboard (sead_ray/ops/dashboard.py) and Ray's own dashboards of the newest session. The same command
runs on a cluster's head node (cluster.yaml); the Ray dashboard embeds Grafana's panels when it runs
on its default ports (9090, 3000). Runs need the Ray dashboard on (`ray.dashboard: true`, the default).
"""
from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from sead_ray.core.config import ConfigError
from sead_ray.ops.dashboard import dashboard_text

log = logging.getLogger(__name__)

SERVICE_DISCOVERY_FILE = "prom_metrics_service_discovery.json"
GRAFANA_HOMES = ("/usr/share/grafana", "/opt/grafana")


def prometheus_config(ray_temp_dir: Path, scrape_interval: str) -> dict:
    """Ray's scrape configuration (ray/dashboard/modules/metrics/export/prometheus/prometheus.yml): job
    `ray`, targets from Ray's service-discovery file; the interval may be shortened."""
    if not re.fullmatch(r"[1-9][0-9]*(ms|s|m)", scrape_interval):
        raise ConfigError(f"--scrape-interval {scrape_interval!r}: expected a duration such as 10s, 500ms or 1m")
    return {"global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": [{"job_name": "ray", "file_sd_configs": [
                {"files": [str(ray_temp_dir / SERVICE_DISCOVERY_FILE)], "refresh_interval": "5s"}]}]}


def ray_session_dashboards(ray_temp_dir: Path) -> Path:
    """The folder of the Grafana dashboards Ray generates for its newest session (through the
    `session_latest` link, so that a Grafana provisioned from it follows new sessions)."""
    return ray_temp_dir / "session_latest" / "metrics" / "grafana" / "dashboards"


def install_dashboard(folder: Path) -> Path:
    """Put the sead-ray dashboard beside Ray's (a Grafana provisioned by Ray's files shows it too)."""
    path = folder / "sead_ray_grafana_dashboard.json"
    path.write_text(dashboard_text())
    return path


def grafana_files(out: Path, prometheus_url: str, port: int, ray_dashboards: Path) -> Path:
    """grafana.ini and its provisioning (data source, the sead-ray dashboard, Ray's dashboards); like
    Ray's generated grafana.ini: anonymous viewers, embedding allowed (the Ray dashboard embeds panels)."""
    grafana = out / "grafana"
    for sub in ("provisioning/datasources", "provisioning/dashboards", "dashboards/sead-ray", "data"):
        (grafana / sub).mkdir(parents=True, exist_ok=True)
    install_dashboard(grafana / "dashboards" / "sead-ray")
    (grafana / "provisioning/datasources/prometheus.yml").write_text(yaml.safe_dump({"apiVersion": 1, "datasources": [
        {"name": "Prometheus", "type": "prometheus", "url": prometheus_url, "access": "proxy", "isDefault": True}]}))
    providers = [{"name": "sead-ray", "folder": "sead-ray", "type": "file",
                  "options": {"path": str(grafana / "dashboards" / "sead-ray")}},
                 {"name": "Ray", "folder": "Ray", "type": "file", "options": {"path": str(ray_dashboards)}}]
    (grafana / "provisioning/dashboards/dashboards.yml").write_text(
        yaml.safe_dump({"apiVersion": 1, "providers": providers}))
    ini = grafana / "grafana.ini"
    ini.write_text(f"[server]\nhttp_addr = 127.0.0.1\nhttp_port = {port}\n\n"
                   "[security]\nallow_embedding = true\n\n"
                   "[auth.anonymous]\nenabled = true\norg_name = Main Org.\norg_role = Viewer\n\n"
                   f"[paths]\nprovisioning = {grafana / 'provisioning'}\ndata = {grafana / 'data'}\n"
                   f"logs = {grafana / 'logs'}\n")
    return ini


def _grafana_command(binary: str, home: Optional[str], ini: Path) -> list[str]:
    homes = [home] if home else [*GRAFANA_HOMES, str(Path(binary).resolve().parent.parent)]
    homepath = next((h for h in homes if (Path(h) / "conf" / "defaults.ini").exists()), None)
    if homepath is None:
        raise ConfigError(f"Grafana {binary}: no Grafana home (conf/defaults.ini) in {', '.join(homes)}; "
                          "pass --grafana-home")
    verb = ["server"] if Path(binary).name == "grafana" else []
    return [binary, *verb, "--homepath", homepath, "--config", str(ini)]


@dataclass
class Monitor:
    """The started servers (each with its log file) and where to look."""
    out: Path
    prometheus_url: str
    grafana_url: Optional[str] = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, command: list[str]) -> None:
        log_file = open(self.out / f"{name}.log", "ab")
        try:
            self.processes[name] = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log_file.close()

    def failed(self) -> Optional[str]:
        """The first server that exited, with the end of its log."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                tail = (self.out / f"{name}.log").read_text(errors="replace")[-1500:]
                return f"{name} exited with code {proc.returncode}; the end of {self.out / f'{name}.log'}:\n{tail}"
        return None

    def wait_ready(self, name: str, url: str, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            problem = self.failed()
            if problem:
                self.stop()
                raise ConfigError(problem)
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise ConfigError(f"{name} did not answer at {url} within {timeout_s:.0f} s (log: {self.out / f'{name}.log'})")

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def start_monitor(out: Path, ray_temp_dir: Path, port: int, grafana_port: int, scrape_interval: str,
                  prometheus_bin: str = "prometheus", grafana_bin: Optional[str] = None,
                  grafana_home: Optional[str] = None) -> Monitor:
    """Start Prometheus (and Grafana when `grafana_bin` is given) and wait until they answer. The arguments are
    checked before the machine: a bad --scrape-interval is named even where Prometheus is not installed."""
    scrape_config = prometheus_config(ray_temp_dir, scrape_interval)
    prometheus = shutil.which(prometheus_bin)
    if prometheus is None:
        raise ConfigError(f"no Prometheus binary {prometheus_bin!r} on PATH: install it (Debian/Ubuntu: "
                          "apt-get install prometheus) or pass --prometheus PATH")
    out.mkdir(parents=True, exist_ok=True)
    config = out / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config))
    monitor = Monitor(out, f"http://127.0.0.1:{port}")
    monitor.start("prometheus", [prometheus, f"--config.file={config}", f"--storage.tsdb.path={out / 'prometheus'}",
                                 f"--web.listen-address=127.0.0.1:{port}"])
    monitor.wait_ready("prometheus", f"{monitor.prometheus_url}/-/ready", 60)
    if grafana_bin:
        ini = grafana_files(out, monitor.prometheus_url, grafana_port, ray_session_dashboards(ray_temp_dir))
        monitor.start("grafana", _grafana_command(grafana_bin, grafana_home, ini))
        monitor.grafana_url = f"http://127.0.0.1:{grafana_port}"
        monitor.wait_ready("grafana", f"{monitor.grafana_url}/api/health", 120)
    return monitor


def query(prometheus_url: str, promql: str) -> list[dict]:
    """An instant query through Prometheus's HTTP API: the result vector."""
    from urllib.parse import quote
    with urllib.request.urlopen(f"{prometheus_url}/api/v1/query?query={quote(promql)}", timeout=10) as resp:
        body = json.loads(resp.read())
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus query {promql!r} failed: {body}")
    return body["data"]["result"]


def cmd_monitor(args) -> int:
    grafana = args.grafana or (None if args.no_grafana else shutil.which("grafana") or shutil.which("grafana-server"))
    ray_temp_dir = Path(args.ray_temp_dir)
    monitor = start_monitor(Path(args.dir), ray_temp_dir, args.port, args.grafana_port, args.scrape_interval,
                            args.prometheus, grafana, args.grafana_home)
    print(f"Prometheus: {monitor.prometheus_url} (scraping the Ray nodes listed in "
          f"{ray_temp_dir / SERVICE_DISCOVERY_FILE}, every {args.scrape_interval}; data in {Path(args.dir) / 'prometheus'})")
    print(f"Grafana:    {monitor.grafana_url}/d/seadRayLoop" if monitor.grafana_url else
          "Grafana:    not installed (pass --grafana PATH); import deploy/grafana/sead_ray_dashboard.json into yours")
    print(f"Try:        curl -s '{monitor.prometheus_url}/api/v1/query?query=ray_sead_cr'   (Ctrl-C stops)", flush=True)
    installed: set[Path] = set()   # sessions whose Ray dashboards folder has the sead-ray dashboard
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # stop the servers on `kill` too, not only Ctrl-C
    try:
        while True:
            # Without a Grafana of ours, follow new Ray sessions: put the sead-ray dashboard beside the ones
            # Ray generates, for a Grafana provisioned from Ray's files (ours provisions it itself).
            folder = ray_session_dashboards(ray_temp_dir).resolve()
            if not monitor.grafana_url and folder not in installed and (folder / "default_grafana_dashboard.json").exists():
                log.info("sead-ray dashboard added to %s", install_dashboard(folder))
                installed.add(folder)
            problem = monitor.failed()
            if problem:
                raise ConfigError(problem)
            time.sleep(5)
    finally:
        monitor.stop()
