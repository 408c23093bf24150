"""StatsActor on a real Ray cluster: metrics.jsonl, TensorBoard events, and Ray custom metrics that
the dashboard's metrics view (Prometheus) scrapes from the node's metrics agent."""
import json
import time
import urllib.request

import pytest

from tests.unit.evaluation.test_metrics import HAND

pytestmark = pytest.mark.slow


def test_stats_actor_writes_files_tensorboard_and_ray_gauges(ray_cluster, schema, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from actors.stats import StatsActor
    ray = ray_cluster
    stats = StatsActor.remote(str(tmp_path), schema)
    row = ray.get(stats.record_iteration.remote(1, "train", HAND, {"train_loss": 0.5, "reward_mean": 0.25},
                                                 {"band_fractions": {"easy": 0.5, "hard": 0.5}, "sampling_entropy": 1.5}))
    assert row["cr"] == pytest.approx(2 / 3) and row["train_loss"] == 0.5
    ray.get(stats.close.remote())
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["band_fractions"] == {"easy": 0.5, "hard": 0.5}
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/cr", "train/train_loss", "train/reward_mean", "train/band_easy", "train/sampling_entropy"} <= tags
    assert events.Scalars("train/cr")[0].value == pytest.approx(2 / 3)

    # the same figures as Ray Gauges on the node's Prometheus endpoint (exported every few seconds)
    # (runs of earlier tests on the session's cluster may still export theirs: this run's lines carry its name)
    port = ray.nodes()[0]["MetricsExportPort"]
    deadline, cr_lines, text = time.time() + 60, [], ""
    while time.time() < deadline:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        cr_lines = [line for line in text.splitlines()
                    if line.startswith("ray_sead_cr{") and f'run="{tmp_path.name}"' in line]
        if cr_lines and "sead_train_loss" in text:
            break
        time.sleep(2)
    assert cr_lines, "this run's sead_cr not exported to the Ray metrics endpoint"
    assert float(cr_lines[0].rsplit(" ", 1)[1]) == pytest.approx(2 / 3)


def test_a_resumed_run_drops_the_tensorboard_points_it_redoes(ray_cluster, schema, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from actors.stats import StatsActor
    ray = ray_cluster
    first = StatsActor.remote(str(tmp_path), schema)
    for it in (1, 2, 3):     # the interrupted run logged iterations 1-3, its checkpoint holds iteration 1
        ray.get(first.record_iteration.remote(it, "train", HAND, {"reward_mean": float(it)}))
    ray.get(first.close.remote())
    resumed = StatsActor.remote(str(tmp_path), schema, first_iteration=2)
    for it in (2, 3):
        ray.get(resumed.record_iteration.remote(it, "train", HAND, {"reward_mean": 10.0 * it}))
    ray.get(resumed.close.remote())
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    points = [(e.step, e.value) for e in events.Scalars("train/reward_mean")]
    assert points == [(1, 1.0), (2, 20.0), (3, 30.0)], points   # each iteration once, the redone values


def test_a_killed_stats_actor_is_restarted_and_keeps_appending(ray_cluster, schema, tmp_path):
    from actors.stats import StatsActor
    ray = ray_cluster
    stats = StatsActor.options(max_restarts=3, max_task_retries=2).remote(str(tmp_path), schema, first_iteration=1)
    ray.get(stats.record_iteration.remote(1, "train", HAND, {}))
    ray.kill(stats, no_restart=False)   # as if its process died
    ray.get(stats.record_iteration.remote(2, "train", HAND, {}), timeout=120)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2]
