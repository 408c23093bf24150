"""StatsActor: per-iteration metrics into `metrics.jsonl`, TensorBoard and the Ray dashboard.

It receives each iteration's dialogue records (and the curriculum snapshot of the controller),
computes the paper's metrics, and writes them three ways: one JSON line per iteration, TensorBoard
scalars plus a few sample dialogues as text, and Ray custom metrics (Gauges, actors/gauges.py) that
Prometheus scrapes for the Ray dashboard's metrics view and the sead-ray Grafana dashboard.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional

import ray

from actors.gauges import RayGauges
from sead_ray.core.jsonl import append_jsonl
from sead_ray.evaluation.metrics import completion_by_start, compute_metrics
from sead_ray.scenario.state import StateSchema

# Row keys shown as TensorBoard scalars and Ray Gauges (plus every `train_*` figure of the GRPO step).
_SCALARS = ("cr", "att", "upa", "ei", "ti", "ci", "agent_parse_failures", "user_parse_failures", "dialogues_per_s",
            "agent_tokens_per_s", "sampling_entropy", "reward_mean", "policy_version", "sync_s", "rollout_s",
            "iteration_s", "user_engines", "error_calls", "error_replays",
            "user_step_clamps", "user_status_overrides", "answer_rate", "upa_middle_guess")


def _render_dialogue(record: dict) -> str:
    lines = [f"**profile** `{json.dumps(record['profile'])}`  \n**end** {record['end_reason']} ({record['outcome']})", ""]
    for i, t in enumerate(record["turns"], 1):
        lines.append(f"{i}. **agent**: {t['agent']}  \n   **user** ({t.get('user_status')}): {t.get('user')}")
    return "\n".join(lines)


def _rows_written(path: Path) -> set[tuple[int, str]]:
    """(iteration, phase) of each complete row of a metrics file (none if there is no file yet)."""
    written = set()
    for line in path.read_text().splitlines() if path.exists() else ():
        try:
            row = json.loads(line)
        except ValueError:   # a line torn by the process that died
            continue
        written.add((row.get("iteration"), row.get("phase")))
    return written


@ray.remote(num_cpus=0)
class StatsActor:
    def __init__(self, run_dir: str, schema: StateSchema, tensorboard: bool = True, samples_per_iteration: int = 2,
                 first_iteration: int = 1):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.schema = schema
        self.samples = samples_per_iteration
        self.writer = None
        restarted = ray.get_runtime_context().was_current_actor_reconstructed
        # Restarted by Ray mid-run, its calls are retried: one the dead process had already written is not written
        # twice (a row is the same (iteration, phase) every time it is computed)
        self.written = _rows_written(self.run_dir / "metrics.jsonl") if restarted else set()
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter
            # A resumed run redoes the iterations after its checkpoint: TensorBoard drops the points the
            # interrupted run had logged from that step on (purge_step), so no iteration appears twice. Not
            # when Ray restarted this actor mid-run: those points are this run's.
            self.writer = SummaryWriter(str(self.run_dir / "tensorboard"),
                                        purge_step=first_iteration if first_iteration > 1 and not restarted else None)
        self.gauges = RayGauges()

    def record_iteration(self, iteration: int, phase: str, records: list[dict], extra: Optional[dict] = None,
                         curriculum: Optional[dict] = None) -> dict:
        """Metrics of one iteration's dialogues; `extra` adds timings/throughput, `curriculum` the
        controller's snapshot (band fractions, sampling entropy)."""
        m = compute_metrics(records, self.schema)
        row = {"iteration": iteration, "phase": phase, "time": time.time(), **m.to_json(), **(extra or {})}
        user_sets = sorted({r["profile"].get("user_set") or "" for r in records})
        if len(user_sets) > 1:   # a held-out set drawn from several user sets (train.eval_user_sets)
            row["cr_by_user_set"] = {s: {"successes": m.successes, "n": m.n} for s in user_sets
                                     for m in [compute_metrics([r for r in records
                                                                if (r["profile"].get("user_set") or "") == s],
                                                               self.schema)]}
        by_start = completion_by_start(records)
        if by_start:   # calls started deeper (curriculum.depth: reverse): CR per start, the frontier
            row["cr_by_start"] = by_start
        if curriculum is not None:
            row["band_fractions"] = curriculum.get("band_fractions")
            row["sampling_entropy"] = curriculum.get("sampling_entropy")
        if (iteration, phase) in self.written:
            return row
        append_jsonl(self.run_dir / "metrics.jsonl", row)
        scalars = {k: v for k, v in row.items() if (k in _SCALARS or k.startswith("train_"))
                   and (v is None or isinstance(v, (int, float)) and not isinstance(v, bool))}
        self.log_scalars(iteration, scalars, prefix=phase)
        for start, cell in by_start.items():
            if self.writer is not None:
                self.writer.add_scalar(f"{phase}/cr_{start}", cell["cr"], iteration)
        for band, share in (row.get("band_fractions") or {}).items():   # one gauge, a series per band
            if self.writer is not None:
                self.writer.add_scalar(f"{phase}/band_{band}", share, iteration)
            self.gauges.set("curriculum_band_fraction", share, {"run": self.run_dir.name, "phase": phase, "band": band})
        if self.writer is not None:
            for i, record in enumerate(records[: self.samples]):
                self.writer.add_text(f"{phase}/dialogue_{i}", _render_dialogue(record), iteration)
            self.writer.flush()
        return row

    def log_scalars(self, step: int, scalars: dict, prefix: str = "train") -> None:
        tags = {"run": self.run_dir.name, "phase": prefix}
        for key, value in scalars.items():
            if value is not None and self.writer is not None:
                self.writer.add_scalar(f"{prefix}/{key}", value, step)
            # no value this time (ATT without a success): NaN, not the gauge's stale last value
            self.gauges.set(key, math.nan if value is None else value, tags)
        if self.writer is not None:
            self.writer.flush()

    def record_roles(self, health: dict[str, dict]) -> None:
        """Per role (agent, user, ...): engines alive and dead, and restarts so far."""
        for role, counts in health.items():
            tags = {"run": self.run_dir.name, "role": role}
            for key in ("alive", "dead", "restarts"):
                self.gauges.set("actor_restarts" if key == "restarts" else f"engines_{key}", counts.get(key, 0), tags)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
