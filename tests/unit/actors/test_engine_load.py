"""The engine's load window (actors.engine_load.EngineLoad), fed as vLLM's stat logger feeds it: one
record per engine step with the requests running after it and the prefix-cache lookups it made."""
import pytest


def test_busy_fraction_mean_batch_and_prefix_hits_of_a_window(monkeypatch):
    from actors import engine_load
    clock = iter([0.0,            # reset
                  1.0, 2.0, 3.0,  # steps: 4 running from t=1 to 2, 2 running from 2 to 3, then idle
                  7.0,            # the next step after 4 idle seconds
                  10.0])          # window()
    monkeypatch.setattr(engine_load.time, "perf_counter", lambda: next(clock))
    load = engine_load.EngineLoad()
    load.record(4, prefix_queries=100, prefix_hits=60)
    load.record(2, prefix_queries=50, prefix_hits=40)
    load.record(0)
    load.record(1)
    window = load.window()
    assert window["wall_s"] == pytest.approx(10.0)
    assert window["busy_fraction"] == pytest.approx(2.0 / 10.0)            # t=1..3 only
    assert window["mean_running"] == pytest.approx((4 * 1 + 2 * 1) / 2.0)  # while busy
    assert window["prefix_hit_rate"] == pytest.approx(100 / 150)
    # the counts too: the run pools them over its engines (agent_prefix_cache_hit_rate in metrics.jsonl)
    assert (window["prefix_queries"], window["prefix_hits"]) == (150, 100)


def test_a_new_window_starts_empty(monkeypatch):
    from actors import engine_load
    clock = iter([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    monkeypatch.setattr(engine_load.time, "perf_counter", lambda: next(clock))
    load = engine_load.EngineLoad()
    load.record(3, prefix_queries=10, prefix_hits=10)
    assert load.window(reset=True)["prefix_hit_rate"] == 1.0   # at t=2, then reset at t=3
    after = load.window()                                      # t=4: nothing recorded since
    assert (after["busy_fraction"], after["prefix_hit_rate"]) == (0.0, 0.0) and after["wall_s"] == pytest.approx(1.0)
