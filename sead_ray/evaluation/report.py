"""The run report: `report/` in a run directory, with plots where a picture says more than a table.

- `progress.png`: completion rate and reward, GRPO loss and KL, rollout-vs-trainer logprob mismatch
  and grad norm, and the curriculum's band fractions, per iteration;
- `cr_by_state.png`: completion rate over the initial-state grid (two dimensions at a time, pooled
  over the others), from the latest `curriculum/iter_NNNN.json`;
- `summary.md`: the per-iteration table and where things are.

Pure file-in/file-out (matplotlib with the Agg back-end, imported lazily); `sead-ray report RUN_DIR`
rebuilds it at any time, and `sead-ray train` writes it at the end of a run.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

from sead_ray.core.jsonl import read_jsonl, read_text
from sead_ray.evaluation.held_out import format_held_out_test, held_out_test
from sead_ray.evaluation.made_up import made_up
from sead_ray.evaluation.metrics import start_order
from sead_ray.evaluation.significance import format_verdict, learning_verdict, success_rate
from sead_ray.scenario.state import StateSchema, parse_state_key


class ReportError(ValueError):
    """The run directory does not hold what a report needs."""


def read_metrics_rows(path: Path, phase: str = "train") -> list[dict]:
    """The rows of `metrics.jsonl` for one phase, in iteration order (the last row of an iteration wins)."""
    return metrics_rows((row for _, row in read_jsonl(path, ReportError, "metrics")), phase)


def metrics_rows(values: Iterable[Any], phase: str = "train") -> list[dict]:
    """The rows of one phase among parsed `metrics.jsonl` lines (`sead-ray view` reads them torn-tolerantly)."""
    rows: dict[int, dict] = {}
    for row in values:
        if isinstance(row, dict) and row.get("phase") == phase and isinstance(row.get("iteration"), int):
            rows[row["iteration"]] = row
    return [rows[k] for k in sorted(rows)]


def held_out_by_start(path: Path) -> dict[str, list[dict]]:
    """The held-out evaluations per start ('cold': phase `eval`, 'dK': phase `eval_dK`, train.eval_depths)."""
    phases = {row.get("phase") for _, row in read_jsonl(path, ReportError, "metrics") if isinstance(row, dict)}
    starts = sorted((p for p in phases if isinstance(p, str) and p.startswith("eval_d") and p[6:].isdigit()),
                    key=lambda p: int(p[6:]))
    by_start = {p[5:]: read_metrics_rows(path, p) for p in starts}
    cold = read_metrics_rows(path, "eval")
    return {**by_start, "cold": cold} if cold else by_start


def starts_table(title: str, columns: Sequence[str], cells: dict[int, dict[str, str]]) -> list[str]:
    """A markdown table: one row per iteration, one column per start."""
    lines = ["", title, "", "| iter | " + " | ".join(columns) + " |", "|---:|" + "---:|" * len(columns)]
    for iteration in sorted(cells):
        lines.append(f"| {iteration} | " + " | ".join(cells[iteration].get(c, "-") for c in columns) + " |")
    return lines


def latest_curriculum(run_dir: Path, schema: Optional[StateSchema] = None) -> Optional[dict]:
    """The newest `curriculum/iter_NNNN.json`, or None; raises ReportError naming the file when it is not
    JSON or its `states` do not map states of the schema's grid to {attempts, successes} counts."""
    files = sorted((run_dir / "curriculum").glob("iter_*.json"))
    if not files:
        return None
    text = read_text(files[-1], ReportError, "curriculum")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{files[-1]}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    states = data.get("states") if isinstance(data, dict) else None
    if not isinstance(states, dict):
        raise ReportError(f"{files[-1]}: a curriculum file must be an object with a 'states' object")
    for key, entry in states.items():
        if not _grid_state(key, schema) or not isinstance(entry, dict) \
                or not all(isinstance(entry.get(k, 0), int) for k in ("attempts", "successes")):
            raise ReportError(f"{files[-1]}: states.{key}: not a state of the scenario's grid with integer "
                              "attempts and successes")
    return data


def _grid_state(key: str, schema: Optional[StateSchema]) -> bool:
    try:
        state = parse_state_key(key)
    except ValueError:
        return False
    return schema is None or len(state) == len(schema.max_levels) and \
        all(0 <= v <= top for v, top in zip(state, schema.max_levels))


def cr_grid(curriculum: dict, schema: StateSchema, rows_dim: int, cols_dim: int) -> list[list[Optional[float]]]:
    """CR over two state dimensions, pooling attempts and successes over the other dimensions
    (None where no call was made)."""
    shape = (len(schema.dimensions[rows_dim].levels), len(schema.dimensions[cols_dim].levels))
    attempts = [[0] * shape[1] for _ in range(shape[0])]
    successes = [[0] * shape[1] for _ in range(shape[0])]
    for key, entry in curriculum["states"].items():
        state = parse_state_key(key)
        r, c = state[rows_dim], state[cols_dim]
        attempts[r][c] += entry.get("attempts", 0)
        successes[r][c] += entry.get("successes", 0)
    return [[successes[r][c] / attempts[r][c] if attempts[r][c] else None for c in range(shape[1])]
            for r in range(shape[0])]


def _fmt(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def calls_of(row: dict) -> tuple[int, int]:
    """(successes, calls) of one iteration, calls ending in an infrastructure error left out."""
    return int(row.get("successes", 0)), int(row.get("n", 0)) - int(row.get("error_calls", 0) or 0)


def learning_summary(rows: list[dict], window: int = 2) -> dict:
    """Success rate per iteration as k/n with a 95 % Wilson interval and, from 2 x `window` iterations
    on, the pooled calls of the first `window` against the last `window` (exact one-sided test and a
    bootstrap interval of the gain: a gain is claimed only when both exclude chance)."""
    per_iteration = []
    for r in rows:
        k, n = calls_of(r)
        rate = success_rate(k, n)
        per_iteration.append({"iteration": r["iteration"], "k": k, "n": n, "low": rate.low, "high": rate.high,
                              "text": str(rate)})
    out: dict = {"per_iteration": per_iteration, "verdict": None}
    if len(rows) >= 2 * window:
        def pooled(part):
            return [True] * sum(calls_of(r)[0] for r in part) + \
                   [False] * sum(calls_of(r)[1] - calls_of(r)[0] for r in part)
        before, after = pooled(rows[:window]), pooled(rows[-window:])
        if before and after:
            out["verdict"] = learning_verdict(before, after)
            out["verdict_text"] = format_verdict(out["verdict"], f"training calls, first {window} iterations",
                                                 f"training calls, last {window} iterations", is_test=False)
    return out


def print_learning(run_dir: Path) -> None:
    """Success rate per iteration with intervals, and the before/after test when there are enough iterations."""
    metrics = run_dir / "metrics.jsonl"
    rows = read_metrics_rows(metrics) if metrics.exists() else []
    if not rows:
        return
    test = held_out_test(run_dir)
    if test is not None:
        print("\nlearning verdict (" + format_held_out_test(test) + ")")
    learning = learning_summary(rows)
    print("\nsuccess rate per iteration (training calls, 95 % Wilson interval):")
    for p in learning["per_iteration"]:
        print(f"  iteration {p['iteration']:>3}: {p['text']}")
    if learning["verdict"] is not None:
        print(learning["verdict_text"])


def summary_markdown(run_dir: Path, rows: list[dict], checkpoint: Optional[str], learning: dict,
                     held_out: Sequence[dict] = (), held_out_starts: Optional[dict[str, list[dict]]] = None) -> str:
    test = held_out_test(run_dir)
    lines = [f"# sead-ray run `{run_dir}`", ""]
    if test is not None:
        lines += ["## Learning verdict", "", "```", format_held_out_test(test), "```", ""]
    lines += ["| iter | CR | reward | loss | KL | logprob mismatch | dialogues/s | agent tok/s | engines | s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["iteration"], _fmt(r.get("cr"), ".2f"), _fmt(r.get("reward_mean"), ".3f"),
            _fmt(r.get("train_loss"), ".4f"), _fmt(r.get("train_kl"), ".2e"),
            _fmt(r.get("train_logprob_mismatch_mean"), ".2e"), _fmt(r.get("dialogues_per_s"), ".3f"),
            _fmt(r.get("agent_tokens_per_s"), ".1f"), _fmt(r.get("user_engines"), "d"), _fmt(r.get("iteration_s"), ".0f")))
    lines += ["", "## Success rate per iteration (95 % Wilson interval)", ""]
    lines += [f"- iteration {p['iteration']}: {p['text']}" for p in learning["per_iteration"]]
    if learning["verdict"] is not None:
        lines += ["", "## Training calls, first and last iterations", "", "```", learning["verdict_text"], "```"]
    if held_out:
        lines += ["", "## Held-out evaluation (greedy, fixed profiles and seeds: `train.eval_every`)", ""]
        lines += [f"- after iteration {p['iteration']}: {p['text']}" for p in learning_summary(held_out)["per_iteration"]]
    trained_starts = [r for r in rows if r.get("cr_by_start")]
    if trained_starts:   # curriculum.depth: reverse
        columns = sorted({s for r in trained_starts for s in r["cr_by_start"]}, key=start_order)
        lines += starts_table("## Training calls by start (CR, calls; cold = the paper's call, dK = the policy takes over "
                              "K turns before the honest script's ask)", columns,
                              {r["iteration"]: {s: f"{c['cr']:.2f} ({c['n']})" for s, c in r["cr_by_start"].items()}
                               for r in trained_starts})
    if held_out_starts and (set(held_out_starts) != {"cold"} or any(r.get("cr_by_user_set") for r in held_out)):
        columns = sorted(held_out_starts, key=start_order)
        cells: dict[int, dict[str, str]] = {}
        for start, start_rows in held_out_starts.items():
            for r in start_rows:
                k, n = calls_of(r)
                by_set = r.get("cr_by_user_set") or {}
                cells.setdefault(r["iteration"], {})[start] = f"{k}/{n}" + (" ({})".format(", ".join(
                    f"{name or 'no set'} {c['successes']}/{c['n']}" for name, c in by_set.items())) if by_set else "")
        lines += starts_table("## Held-out evaluation by start (greedy, won/calls, per user set)", columns, cells)
    plots = ["progress.png", "cr_by_state.png"] + (["cr_by_start.png"] if trained_starts or held_out_starts else [])
    lines += ["", f"- checkpoint: `{checkpoint or 'none yet'}`",
              f"- TensorBoard: `tensorboard --logdir {run_dir / 'tensorboard'}`",
              f"- plots: {', '.join(f'`{p}`' for p in plots)} (this folder)", ""]
    return "\n".join(lines)


def _plot_progress(rows: list[dict], path: Path, learning: dict, held_out: Sequence[dict] = ()) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    its = [r["iteration"] for r in rows]

    def series(key):
        return [r.get(key) if isinstance(r.get(key), (int, float)) else float("nan") for r in rows]

    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    ax = axes[0][0]
    per_iteration = learning["per_iteration"]
    rates = [p["k"] / p["n"] if p["n"] else float("nan") for p in per_iteration]
    ax.errorbar(its, rates, yerr=[[max(0.0, r - p["low"]) for r, p in zip(rates, per_iteration)],
                                  [max(0.0, p["high"] - r) for r, p in zip(rates, per_iteration)]],
                fmt="o-", capsize=3, label="success rate, training calls (95 % interval)")
    if held_out:
        ax.plot([r["iteration"] for r in held_out], [calls_of(r)[0] / max(1, calls_of(r)[1]) for r in held_out],
                "D-", label="success rate, held-out evaluation")
    ax.plot(its, series("reward_mean"), "s--", label="mean reward")
    ax.set_title("outcome per iteration")
    ax.set_ylim(-0.05, 1.05)
    ax.legend()
    ax = axes[0][1]
    ax.plot(its, series("train_loss"), "o-", label="GRPO loss")
    ax.plot(its, series("train_kl"), "s--", label="KL to reference")
    ax.set_title("policy update")
    ax.legend()
    ax = axes[1][0]
    ax.semilogy(its, [abs(v) if v == v and v != 0 else float("nan") for v in series("train_logprob_mismatch_mean")],
                "o-", label="logprob mismatch (rollout vs trainer)")
    ax.semilogy(its, [v if v == v and v > 0 else float("nan") for v in series("train_grad_norm")], "s--",
                label="grad norm")
    ax.set_title("stability")
    ax.legend()
    ax = axes[1][1]
    bands = sorted({b for r in rows for b in (r.get("band_fractions") or {})})
    if bands:
        ax.stackplot(its, *[[(r.get("band_fractions") or {}).get(b, 0.0) for r in rows] for b in bands], labels=bands)
        ax.legend(loc="upper left")
    ax.set_ylim(0, 1)
    ax.set_title("curriculum bands (share of initial states)")
    for ax in axes.flat:
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_cr_by_start(rows: list[dict], held_out_starts: dict[str, list[dict]], path: Path) -> None:
    """The frontier: CR per start over the iterations, training calls (left) and held-out greedy calls (right)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    starts = sorted({s for r in rows for s in (r.get("cr_by_start") or {})}, key=start_order)
    # one colour per start in both panels
    colour = {s: f"C{i}" for i, s in enumerate(sorted(set(starts) | set(held_out_starts), key=start_order))}
    for start in starts:
        points = [(r["iteration"], r["cr_by_start"][start]["cr"]) for r in rows if start in (r.get("cr_by_start") or {})]
        axes[0].plot(*zip(*points), "o-", label=start, color=colour[start])
    for start in sorted(held_out_starts, key=start_order):
        points = [(r["iteration"], calls_of(r)[0] / max(1, calls_of(r)[1])) for r in held_out_starts[start]]
        if points:
            axes[1].plot(*zip(*points), "D-", label=start, color=colour[start])
    for ax, title in zip(axes, ("training calls (sampled) by start", "held-out calls (greedy) by start")):
        ax.set_title(title)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("iteration")
        ax.set_ylabel("completion rate")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.lines:
            ax.legend(title="start (dK: K turns before the ask)")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_cr_by_state(curriculum: dict, schema: StateSchema, path: Path) -> None:
    import matplotlib.pyplot as plt
    import numpy as np
    pairs = list(itertools.combinations(range(len(schema.dimensions)), 2))[:3]
    fig, axes = plt.subplots(1, len(pairs), figsize=(5 * len(pairs), 4.2), constrained_layout=True, squeeze=False)
    image = None
    for ax, (r, c) in zip(axes[0], pairs):
        grid = np.array([[np.nan if v is None else v for v in row] for row in cr_grid(curriculum, schema, r, c)])
        image = ax.imshow(grid, origin="lower", vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        ax.set_ylabel(schema.dimensions[r].name)
        ax.set_xlabel(schema.dimensions[c].name)
        ax.set_yticks(range(grid.shape[0]))
        ax.set_xticks(range(grid.shape[1]))
        for (i, j), v in np.ndenumerate(grid):
            if v == v:
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), label="completion rate (blank: never called)")
    fig.suptitle(f"completion rate by initial state after iteration {curriculum.get('iteration', '?')}")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def made_up_markdown(run_dir: Path, own_sentences: Sequence[str], top: int = 5) -> list[str]:
    """Per dialogues file, the sentences of won calls that are not the scenario's (evaluation/made_up.py)."""
    lines = ["", "## What the agent made up (sentences of won calls that are not the scenario's)", ""]
    for path in sorted((run_dir / "dialogues").glob("*.jsonl")):
        records = [json.loads(line) for line in read_text(path, ReportError, "dialogues").splitlines() if line.strip()]
        found = made_up(records, list(own_sentences))
        won = sum(r.get("outcome") == "success" for r in records)
        lines.append(f"- `{path.name}`: {len(found)} sentence(s), said {sum(f['said'] for f in found)} time(s), "
                     f"in {won} won call(s)")
        lines += [f"  - {f['said']} x {f['sentence']!r} (nearest: {f['nearest']!r}, {f['similarity']:.2f})"
                  for f in found[:top]]
    return lines


def write_report(run_dir: Path, schema: StateSchema, checkpoint: Optional[str] = None,
                 own_sentences: Sequence[str] = ()) -> list[Path]:
    """Write `run_dir/report/`; returns the files written. Raises ReportError if there is nothing to show.
    `own_sentences` (made_up.scenario_sentences): the won calls' other sentences are listed, per dialogues file."""
    import matplotlib
    matplotlib.use("Agg")
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        raise ReportError(f"{run_dir} has no metrics.jsonl: is it a `sead-ray train` run directory?")
    rows = read_metrics_rows(metrics)
    if not rows:
        raise ReportError(f"{metrics} has no finished training iteration yet")
    curriculum = latest_curriculum(run_dir, schema)   # a broken file fails before anything is written
    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    written = [out / "summary.md", out / "progress.png"]
    held_out = read_metrics_rows(metrics, phase="eval")
    held_out_starts = held_out_by_start(metrics)
    learning = learning_summary(rows)   # the table and the plot show the same intervals (one bootstrap)
    summary = summary_markdown(run_dir, rows, checkpoint, learning, held_out, held_out_starts)
    written[0].write_text(summary + ("\n".join(made_up_markdown(run_dir, own_sentences)) + "\n" if own_sentences else ""))
    _plot_progress(rows, written[1], learning, held_out)
    if any(r.get("cr_by_start") for r in rows) or set(held_out_starts) - {"cold"}:
        written.append(out / "cr_by_start.png")
        _plot_cr_by_start(rows, held_out_starts, written[-1])
    if curriculum is not None and len(schema.dimensions) >= 2:
        written.append(out / "cr_by_state.png")
        _plot_cr_by_state(curriculum, schema, written[-1])
    return written
