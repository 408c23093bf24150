"""Monitoring: the Grafana dashboard, `sead-ray monitor`'s Prometheus and Grafana files, and a real
Prometheus scraping a real tiny training run (its Ray cluster found through Ray's service discovery)."""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
import yaml

from sead_ray.core.config import ConfigError
from sead_ray.ops.dashboard import FILTER, JSON_PATH, dashboard, dashboard_text, expression_metrics, metric_names
from sead_ray.ops.monitor import (
    SERVICE_DISCOVERY_FILE,
    _grafana_command,
    grafana_files,
    prometheus_config,
    query,
)
from tests.conftest import ROOT


def _expressions(board: dict) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def test_the_dashboard_in_the_repository_is_the_generated_one():
    assert JSON_PATH.read_text() == dashboard_text(), "run: python -m sead_ray.ops.dashboard --write"
    board = json.loads(JSON_PATH.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "SessionName", "run"}
    expressions = _expressions(board)
    assert len(expressions) >= 30
    for expr in expressions:   # every query filters on the session and run, and reads a listed metric
        assert FILTER in expr and expression_metrics(expr) and expression_metrics(expr) <= metric_names()
    cells = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]]
    assert len(cells) == len(set(cells)), "panels overlap"


def test_prometheus_config_is_rays_scrape_config_with_our_interval(tmp_path):
    from ray.dashboard.consts import PROMETHEUS_CONFIG_INPUT_PATH
    rays = yaml.safe_load(open(PROMETHEUS_CONFIG_INPUT_PATH))
    ours = prometheus_config(tmp_path, "2s")
    assert [j["job_name"] for j in ours["scrape_configs"]] == [j["job_name"] for j in rays["scrape_configs"]]
    assert ours["scrape_configs"][0]["file_sd_configs"][0]["files"] == [str(tmp_path / SERVICE_DISCOVERY_FILE)]
    assert rays["scrape_configs"][0]["file_sd_configs"][0]["files"][0].endswith(SERVICE_DISCOVERY_FILE)
    assert ours["global"]["scrape_interval"] == "2s"
    for bad in ("2", "0s", "fast", "1h; rm"):
        with pytest.raises(ConfigError, match="scrape-interval"):
            prometheus_config(tmp_path, bad)


def test_grafana_gets_a_datasource_the_dashboard_and_rays_dashboards(tmp_path):
    ray_dashboards = tmp_path / "ray_dashboards"
    ray_dashboards.mkdir()
    ini = grafana_files(tmp_path / "out", "http://127.0.0.1:9999", 3123, ray_dashboards)
    text = ini.read_text()
    assert "http_addr = 127.0.0.1" in text and "http_port = 3123" in text and "allow_embedding = true" in text
    prov = tmp_path / "out" / "grafana" / "provisioning"
    source = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert source["url"] == "http://127.0.0.1:9999" and source["type"] == "prometheus"
    providers = yaml.safe_load((prov / "dashboards" / "dashboards.yml").read_text())["providers"]
    paths = {p["name"]: p["options"]["path"] for p in providers}
    assert paths["Ray"] == str(ray_dashboards)
    board = json.loads((tmp_path / "out" / "grafana" / "dashboards" / "sead-ray" / "sead_ray_grafana_dashboard.json")
                       .read_text())
    assert board == dashboard()
    with pytest.raises(ConfigError, match="no Grafana home"):
        _grafana_command(str(tmp_path / "bin" / "grafana"), str(tmp_path / "nowhere"), ini)
    (tmp_path / "home" / "conf").mkdir(parents=True)
    (tmp_path / "home" / "conf" / "defaults.ini").write_text("")
    assert _grafana_command("/x/bin/grafana", str(tmp_path / "home"), ini)[1:3] == ["server", "--homepath"]


def test_monitor_without_prometheus_says_how_to_get_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sead_ray.cli.main", "monitor", "--dir", str(tmp_path),
                           "--prometheus", str(tmp_path / "no-such-prometheus")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "apt-get install prometheus" in proc.stderr and "Traceback" not in proc.stderr




# A Ray session with the dashboard on (its service discovery is what Prometheus follows) in which the stats
# actor records the hand-made calls of tests/unit/evaluation/test_metrics.py (successes and estimates), then waits to be
# scraped (SIGTERM from the test ends it and its local cluster).
RECORD_HAND_CALLS = """
import sys, time
import ray
from actors.stats import StatsActor
from sead_ray.scenario.scenario import load_scenario
from tests.conftest import SCENARIO
from tests.unit.evaluation.test_metrics import HAND
ray.init(num_cpus=1, include_dashboard=True)
stats = StatsActor.remote(sys.argv[1], load_scenario(SCENARIO).schema)
ray.get(stats.record_iteration.remote(1, "eval", HAND, {}))
time.sleep(300)   # until the test, once Prometheus has the figures, stops this session
"""

@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_real_prometheus_scrapes_a_training_run(finished_run):
    """The session's finished run (tests/conftest.py), scraped by the session's Prometheus while it trained
    (made by an earlier test: the queries look back two hours)."""
    url = finished_run.prometheus
    if url is None:
        pytest.skip("no Prometheus binary on this machine (make test installs Debian's `prometheus` when it runs "
                    "as root with apt-get)")

    def samples(promql: str) -> list[dict]:
        return query(url, promql)

    # the run's own figures, its weight syncs, the version its engine served, the engine's load, and UPA (its
    # turns carry an estimate)
    deadline = time.time() + 10   # (a scrape of the run's last seconds may still be on its way)
    while not (cr := samples('last_over_time(ray_sead_cr{run="run",phase="train"}[2h])')) and time.time() < deadline:
        time.sleep(1)
    assert cr and 0.0 <= float(cr[0]["value"][1]) <= 1.0, "no CR sample of the run in Prometheus"
    assert samples('count_over_time(ray_sead_sync_s{run="run"}[2h])'), "no weight-sync time"
    version = samples('max_over_time(ray_sead_engine_policy_version{run="run",role="agent"}[2h])')
    assert version and float(version[0]["value"][1]) == 4.0, f"policy version served: {version}"
    for load in ("requests_in_flight", "requests_running", "kv_cache_usage"):
        assert samples(f'count_over_time(ray_sead_engine_{load}{{run="run"}}[2h])'), f"no engine {load}"
    assert samples('last_over_time(ray_sead_upa{run="run"}[2h])'), "no UPA of the run"
    assert {s["metric"].get("SessionName") for s in cr} != {None}, "the dashboard filters on SessionName"

    # ATT needs a success, which the tiny random agent never has (a gauge without a value is not exported):
    # a second, short Ray session records hand-made calls that have one
    last = json.loads((finished_run.path / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["att"] is None and last["upa"] is not None, last
    env = {**os.environ, "RAY_metrics_report_interval_ms": "1000"}
    with tempfile.TemporaryDirectory() as folder:   # (the run's label is its folder's name)
        hand = subprocess.Popen([sys.executable, "-c", RECORD_HAND_CALLS, f"{folder}/hand"], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:   # the new session's service discovery, Ray's export and the scrapes take a few seconds
            deadline = time.time() + 120
            while not samples('last_over_time(ray_sead_att{run="hand"}[2h])') and time.time() < deadline:
                assert hand.poll() is None, hand.communicate()[0][-3000:]
                time.sleep(1)
        finally:
            hand.terminate()
            hand.wait(timeout=60)
    assert samples('last_over_time(ray_sead_att{run="hand"}[2h])'), "no ATT of the hand-made calls"

    # every metric the dashboard reads is one Prometheus has
    with urllib.request.urlopen(f"{url}/api/v1/label/__name__/values", timeout=10) as resp:
        names = set(json.loads(resp.read())["data"])
    assert metric_names() - names == set(), "dashboard metrics Prometheus never saw"
    assert all(expression_metrics(e) <= names for e in _expressions(dashboard()))
