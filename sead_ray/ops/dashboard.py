"""The sead-ray Grafana dashboard: the loop's panels, as data, turned into Grafana's dashboard JSON in
the shape of the dashboards Ray generates for its own Grafana integration (a `datasource` variable,
a `SessionName` filter, rows of two panels, uid and title). `sead-ray monitor` provisions it beside
Ray's dashboards; `deploy/grafana/sead_ray_dashboard.json` is the same JSON for manual import
(`python -m sead_ray.ops.dashboard --write` regenerates it; a test keeps the two equal).

Metric names are Prometheus's: Ray exports each `sead_<name>` gauge (actors/gauges.py) as
`ray_sead_<name>`. Each panel lists its metrics; `metric_names()` is what the test checks against a
real Prometheus."""
from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path

UID = "seadRayLoop"
TITLE = "sead-ray: self-evolution loop"
JSON_PATH = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "sead_ray_dashboard.json"
FILTER = 'SessionName=~"$SessionName",run=~"$run"'


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str                              # Grafana unit id: percentunit, s, short, decmbytes, ...
    targets: tuple[tuple[str, str], ...]   # (metric, legend); the metric gets the dashboard's filters


def _by_phase(metric: str, what: str) -> tuple[str, str]:
    return metric, f"{what} {{{{phase}}}} ({{{{run}}}})"


def _by_engine(metric: str, what: str) -> tuple[str, str]:
    return metric, f"{what} {{{{engine}}}} ({{{{run}}}})"


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    ("Learning", (
        Panel("Completion rate (CR)", "Share of calls the simulated user accepted: training draws (temperature, "
              "curriculum) and held-out evaluations (greedy, fixed profiles).", "percentunit",
              (_by_phase("ray_sead_cr", "CR"),)),
        Panel("Reward", "Mean GRPO reward of the iteration's calls (success reward minus format penalties).", "short",
              (_by_phase("ray_sead_reward_mean", "reward"),)),
        Panel("Loss and KL", "GRPO loss, its policy-gradient part and the KL to the reference, per trained token.",
              "short", (_by_phase("ray_sead_train_loss", "loss"), _by_phase("ray_sead_train_pg_loss", "pg loss"),
                        _by_phase("ray_sead_train_kl", "KL"))),
        Panel("Logprob mismatch rollout vs trainer", "Mean and max |logprob(vLLM) - logprob(trainer)| of the sampled "
              "tokens: large values mean the engines serve other weights than the trainer holds.", "short",
              (_by_phase("ray_sead_train_logprob_mismatch_mean", "mean"),
               _by_phase("ray_sead_train_logprob_mismatch_max", "max"))),
        Panel("Gradient norm and entropy", "Global gradient norm before clipping; policy entropy per token.", "short",
              (_by_phase("ray_sead_train_grad_norm", "grad norm"), _by_phase("ray_sead_train_entropy", "entropy"))),
        Panel("Turns, state estimates, engagement", "ATT (turns to success), UPA (agent's user-state estimate "
              "accuracy), and the final emotion, trust and cooperation (EI, TI, CI).", "short",
              (_by_phase("ray_sead_att", "ATT"), _by_phase("ray_sead_upa", "UPA"), _by_phase("ray_sead_ei", "EI"),
               _by_phase("ray_sead_ti", "TI"), _by_phase("ray_sead_ci", "CI"))),
    )),
    ("Curriculum", (
        Panel("Initial-state bands drawn", "Share of the iteration's profiles drawn from each difficulty band "
              "(Mistake Analysis moves draws towards the states the agent fails).", "percentunit",
              (("ray_sead_curriculum_band_fraction", "{{band}} ({{run}})"),)),
        Panel("Sampling entropy", "Entropy of the controller's distribution over initial states (nats).", "short",
              (_by_phase("ray_sead_sampling_entropy", "entropy"),)),
    )),
    ("Time and throughput", (
        Panel("Iteration time", "Wall time of the iteration and of its parts: rollout, GRPO step, weight sync "
              "(end of the step to the engines serving the new version).", "s",
              (_by_phase("ray_sead_iteration_s", "iteration"), _by_phase("ray_sead_rollout_s", "rollout"),
               _by_phase("ray_sead_train_step_s", "GRPO step"), _by_phase("ray_sead_sync_s", "weight sync"))),
        Panel("Rollout throughput", "Calls per second and agent tokens per second of phase 2.", "short",
              (_by_phase("ray_sead_dialogues_per_s", "calls/s"), _by_phase("ray_sead_agent_tokens_per_s", "tokens/s"))),
        Panel("Trainer throughput", "Tokens per second through the GRPO step (all ranks).", "short",
              (_by_phase("ray_sead_train_tokens_per_s", "tokens/s"),)),
        Panel("Trainer peak memory", "Peak resident memory of a trainer worker during the step.", "decmbytes",
              (_by_phase("ray_sead_train_peak_mem_mb", "peak"),)),
    )),
    ("Engines", (
        Panel("Requests per engine", "Requests running and waiting in each vLLM engine's scheduler (its own "
              "stats), and requests in flight from the loop.", "short",
              (_by_engine("ray_sead_engine_requests_running", "running"),
               _by_engine("ray_sead_engine_requests_waiting", "waiting"),
               _by_engine("ray_sead_engine_requests_in_flight", "in flight"))),
        Panel("KV cache usage", "Share of each engine's KV cache blocks in use.", "percentunit",
              (_by_engine("ray_sead_engine_kv_cache_usage", "KV"),)),
        Panel("Prefix cache hit rate", "Share of prompt tokens served from each engine's prefix cache so far.",
              "percentunit", (_by_engine("ray_sead_engine_prefix_cache_hit_rate", "hits"),)),
        Panel("Policy version served", "The weight version each agent engine serves (one step behind the "
              "trainer at most).", "short", (_by_engine("ray_sead_engine_policy_version", "version"),)),
    )),
    ("Faults", (
        Panel("Engines per role", "Engines alive and dead, and engines replaced after dying, per role.", "short",
              (("ray_sead_engines_alive", "alive {{role}} ({{run}})"), ("ray_sead_engines_dead", "dead {{role}} ({{run}})"),
               ("ray_sead_actor_restarts", "restarts {{role}} ({{run}})"),
               _by_phase("ray_sead_user_engines", "user engines"))),
        Panel("Calls in error", "Calls that ended in an infrastructure error (left out of training), and replays.",
              "short", (_by_phase("ray_sead_error_calls", "in error"), _by_phase("ray_sead_error_replays", "replays"))),
        Panel("Output format failures", "Agent and simulator outputs that did not parse; simulator rule corrections.",
              "short", (_by_phase("ray_sead_agent_parse_failures", "agent"),
                        _by_phase("ray_sead_user_parse_failures", "user"),
                        _by_phase("ray_sead_user_step_clamps", "step clamps"),
                        _by_phase("ray_sead_user_status_overrides", "status overrides"))),
    )),
)


def metric_names() -> set[str]:
    return {metric for _, panels in ROWS for panel in panels for metric, _ in panel.targets}


def expression_metrics(expr: str) -> set[str]:
    """The metric names an expression of this dashboard reads (its `ray_...` identifiers)."""
    return set(re.findall(r"\bray_[a-zA-Z0-9_]+", expr))


def _variable(name: str, label: str, metric_filter: str) -> dict:
    query = f"label_values(ray_sead_cr{{{metric_filter}}}, {name})"
    return {"name": name, "label": label, "type": "query", "datasource": "${datasource}", "definition": query,
            "query": {"query": query, "refId": "StandardVariableQuery"}, "refresh": 2, "hide": 0,
            "includeAll": True, "multi": True, "allValue": ".*", "sort": 2,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    return {
        "id": panel_id, "type": "timeseries", "title": panel.title, "description": panel.description,
        "datasource": "${datasource}", "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit, "custom": {"drawStyle": "line", "showPoints": "always",
                                                                    "spanNulls": True}}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [{"expr": f"{metric}{{{FILTER}}}", "legendFormat": legend, "refId": chr(ord("A") + i)}
                    for i, (metric, legend) in enumerate(panel.targets)],
    }


def dashboard() -> dict:
    panels, y, panel_id = [], 0, 1
    for row_title, row_panels in ROWS:
        panels.append({"id": panel_id, "type": "row", "title": row_title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        panel_id, y = panel_id + 1, y + 1
        for i, panel in enumerate(row_panels):
            panels.append(_panel(panel, panel_id, 12 * (i % 2), y + 8 * (i // 2)))
            panel_id += 1
        y += 8 * ((len(row_panels) + 1) // 2)
    return {
        "uid": UID, "title": TITLE, "tags": ["sead-ray", "ray"], "version": 1, "schemaVersion": 27,
        "editable": True, "graphTooltip": 1, "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []}, "panels": panels,
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "refresh": 1, "hide": 2,
             "includeAll": False, "multi": False, "current": {"selected": False}},
            _variable("SessionName", "Ray session", ""),
            _variable("run", "Run", 'SessionName=~"$SessionName"'),
        ]},
    }


def dashboard_text() -> str:
    return json.dumps(dashboard(), indent=1) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="Print (or --write) the sead-ray Grafana dashboard JSON.")
    parser.add_argument("--write", action="store_true", help=f"write it to {JSON_PATH}")
    if parser.parse_args().write:
        JSON_PATH.parent.mkdir(parents=True, exist_ok=True)
        JSON_PATH.write_text(dashboard_text())
        print(f"wrote {JSON_PATH}")
    else:
        print(dashboard_text(), end="")


if __name__ == "__main__":
    main()
