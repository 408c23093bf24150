"""`sead-ray compare`: the paper's Table 1 for several agents played on the same profiles, with
intervals and a paired test, so that a difference between two rows can be told from noise.

Pure file-in/file-out: `compare_rows` turns each agent's dialogue records (the dialogues-file format
of sead_ray.evaluation.metrics) into one row per agent (or per agent and user set); `write_compare` writes
compare.json, compare.md and compare.png. Playing the calls is `sead-ray compare` (sead_ray.cli.main).

- Calls that ended in an infrastructure error are counted in `errors` and left out of every other
  number: an engine crash is not the agent's failure.
- UPA comes with the share of agent turns that gave an estimate and two trivial guessers scored on
  the same turns (the initial state; the middle of each scale), so a UPA can be read against them.
- Every agent after the first gets an exact one-sided McNemar test against the first over the
  profiles both played (same profile, same per-dialogue seeds: only the agent differs).
"""
from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from sead_ray.evaluation.metrics import compute_metrics, dimensions_of, estimate_pairs, mean_std, policy_turns
from sead_ray.evaluation.significance import mcnemar_exact_greater, wilson_interval
from sead_ray.scenario.state import StateSchema

ROW_KEYS = ("agent", "n", "cr", "cr_low", "cr_high", "att", "upa", "ei", "ti", "ci", "errors")
DELTA_KEYS = (("ei", "emotion"), ("ti", "trust"), ("ci", "cooperation"))


def turn_accuracy(estimate: Mapping, truth: Mapping, dims: Sequence[tuple[str, int]]) -> float:
    """1 - mean over dimensions of |estimate - truth| / max_level: UPA of one turn. The mean of it over
    the turns equals metrics.py's pooled UPA (every turn with an estimate carries every dimension)."""
    return 1.0 - sum(abs(float(estimate[name]) - float(truth[name])) / hi for name, hi in dims) / len(dims)


def upa_parts(records: Sequence[Mapping], dims: Sequence[tuple[str, int]]) -> dict:
    """UPA mean/std over estimated turns, the share of turns estimated, and the two guessers' UPA on
    those same turns (initial state of the profile; the middle max_level / 2 of every scale)."""
    acc, init, mid, turns = [], [], [], 0
    middle = {name: hi / 2 for name, hi in dims}
    for r in records:
        pairs = estimate_pairs(r, dims)[0]
        turns += len(policy_turns(r))
        for est, seen in pairs:
            acc.append(turn_accuracy(est, seen, dims))
            init.append(turn_accuracy(r["profile"], seen, dims))
            mid.append(turn_accuracy(middle, seen, dims))
    upa, upa_std = mean_std(acc)
    return {"upa": upa, "upa_std": upa_std, "upa_estimate_share": len(acc) / turns if turns else None,
            "upa_initial_guess": mean_std(init)[0], "upa_middle_guess": mean_std(mid)[0]}


def call_cost(records: Sequence[Mapping], price: Optional[tuple[float, float]]) -> dict:
    """Agent tokens per call (prompt and completion, as the engine or endpoint counted them) and, with a
    price (USD per million tokens in, out), the cost of 1,000 such calls: the paper's cost column."""
    prompt = sum(t.get("agent_prompt_tokens", 0) for r in records for t in r["turns"])
    completion = sum(t.get("agent_tokens", 0) for r in records for t in r["turns"])
    n = max(1, len(records))
    cost = None if price is None else 1000 * (prompt * price[0] + completion * price[1]) / 1e6 / n
    return {"prompt_tokens_per_call": prompt / n, "completion_tokens_per_call": completion / n,
            "cost_per_1k_calls": cost}


def _row(agent: str, records: Sequence[Mapping], schema: Optional[StateSchema],
         price: Optional[tuple[float, float]] = None) -> dict:
    dims = dimensions_of(schema)
    played = [r for r in records if r["end_reason"] != "error"]
    m = compute_metrics(played, schema)
    k = sum(r["outcome"] == "success" for r in played)
    low, high = wilson_interval(k, len(played))
    row: dict = {"agent": agent, "n": len(played), "errors": len(records) - len(played), "successes": k,
                 "cr": m.cr, "cr_low": low, "cr_high": high, "att": m.att, "att_std": m.att_std,
                 **upa_parts(played, dims), **call_cost(played, price)}
    starts_finals = [estimate_pairs(r, dims)[1:] for r in played]
    names = {name for name, _ in dims}
    for key, name in DELTA_KEYS:
        mean, std = mean_std([final[name] - start[name] for start, final in starts_finals] if name in names else [])
        row[key], row[f"{key}_std"] = mean, std
    return row


def check_same_profiles(records_by_agent: Mapping[str, Sequence[Mapping]]) -> None:
    """Pairing is by position (dialogues files are in profile order): every agent must have played the
    same profiles in the same order, or the paired test would compare different calls."""
    agents = list(records_by_agent)
    first = agents[0]
    ref = records_by_agent[first]
    for agent in agents[1:]:
        recs = records_by_agent[agent]
        if len(recs) != len(ref):
            raise ValueError(f"agents {first!r} and {agent!r} played different profile sets: "
                             f"{len(ref)} vs {len(recs)} dialogues")
        for i, (a, b) in enumerate(zip(ref, recs)):
            if a["profile"] != b["profile"] or a.get("group", i) != b.get("group", i):
                raise ValueError(f"agents {first!r} and {agent!r} played different profile sets: dialogue {i} "
                                 f"has profile {a['profile']} vs {b['profile']}")


def paired_test(first: Sequence[Mapping], other: Sequence[Mapping]) -> dict:
    """Exact one-sided McNemar tests of `other` against `first` over the calls neither lost to an error."""
    pairs = [(a["outcome"] == "success", b["outcome"] == "success") for a, b in zip(first, other)
             if a["end_reason"] != "error" and b["end_reason"] != "error"]
    return {"pairs": len(pairs), "better": sum(1 for a, b in pairs if b and not a),
            "worse": sum(1 for a, b in pairs if a and not b), "p_better": mcnemar_exact_greater(pairs),
            "p_worse": mcnemar_exact_greater([(b, a) for a, b in pairs])}


def compare_rows(records_by_agent: Mapping[str, Sequence[Mapping]], schema: Optional[StateSchema] = None,
                 by: Optional[str] = None, prices: Optional[Mapping[str, tuple[float, float]]] = None) -> list[dict]:
    """One row per agent (in the given order; the first is the reference of the paired tests), or with
    by="user_set" one row per (agent, user set), each set paired against the first agent's same set.
    `prices`: per agent, USD per million tokens (in, out) for the cost column."""
    if not records_by_agent:
        raise ValueError("no agents to compare")
    if by not in (None, "user_set"):
        raise ValueError(f"can split by 'user_set' only, not {by!r}")
    check_same_profiles(records_by_agent)
    agents = list(records_by_agent)
    ref = records_by_agent[agents[0]]
    groups: list[Optional[str]] = [None]
    if by == "user_set":
        groups = sorted({r["profile"].get("user_set") for r in ref}, key=lambda s: (s is None, s or ""))
    rows = []
    for group in groups:
        # same indices for every agent: the profiles are the same, position by position
        idx = [i for i, r in enumerate(ref) if by is None or r["profile"].get("user_set") == group]
        for agent in agents:
            recs = [records_by_agent[agent][i] for i in idx]
            row = _row(agent, recs, schema, (prices or {}).get(agent))
            if by is not None:
                row["user_set"] = group
            row["paired_vs_first"] = (None if agent == agents[0]
                                      else {"first": agents[0], **paired_test([ref[i] for i in idx], recs)})
            rows.append(row)
    return rows


def agent_labels(refs: Sequence[str]) -> list[str]:
    """Row names for the agent references; a reference given twice (e.g. to see the run-to-run noise)
    gets #2, #3 so that each run keeps its own row."""
    labels, seen = [], {}
    for ref in refs:
        seen[ref] = seen.get(ref, 0) + 1
        labels.append(ref if seen[ref] == 1 else f"{ref}#{seen[ref]}")
    return labels


def agent_dir_name(index: int, label: str) -> str:
    """`<i>-<label>` with anything but letters, digits, '.', '_' and '-' turned into '_' (paths and
    model names carry '/' and ':')."""
    return f"{index}-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", label.strip("/")).strip("_")[:60] or "agent")


def _f(x: Optional[float], spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def _pm(mean: Optional[float], std: Optional[float], spec: str = ".2f") -> str:
    return "-" if mean is None else f"{mean:{spec}} ± {_f(std, spec.lstrip('+'))}"


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def format_markdown(rows: Sequence[Mapping], title: str) -> str:
    """The comparison table: CR with its 95 % Wilson interval, the rest mean ± population std."""
    split = any("user_set" in r for r in rows)
    judged = any("judge_humanness" in r for r in rows)
    head = (["agent"] + (["user set"] if split else []) +
            ["n", "errors", "CR [95 % CI]", "ATT ± std", "UPA ± std (share)", "UPA guess init / mid",
             "EI ± std", "TI ± std", "CI ± std", "tokens / call (in, out)", "USD / 1k calls",
             "vs first: better/worse, p better / p worse"] +
            (["judge: humanness / emotion / trust / cooperation realism / user, agent violation"] if judged else []))
    lines = [f"# {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        pv = r.get("paired_vs_first")
        paired = ("(reference)" if pv is None else
                  f"{pv['better']}/{pv['worse']} of {pv['pairs']}, p {_p(pv['p_better'])} / {_p(pv['p_worse'])}")
        share = "-" if r["upa_estimate_share"] is None else f"{100 * r['upa_estimate_share']:.0f} %"
        cells = ([r["agent"]] + ([str(r.get("user_set") or "-")] if split else []) +
                 [str(r["n"]), str(r["errors"]),
                  "-" if r["cr"] is None else f"{r['cr']:.3f} [{r['cr_low']:.3f}, {r['cr_high']:.3f}]",
                  _pm(r["att"], r["att_std"]), f"{_pm(r['upa'], r['upa_std'], '.3f')} ({share})",
                  f"{_f(r['upa_initial_guess'])} / {_f(r['upa_middle_guess'])}",
                  _pm(r["ei"], r["ei_std"], "+.2f"), _pm(r["ti"], r["ti_std"], "+.2f"),
                  _pm(r["ci"], r["ci_std"], "+.2f"),
                  f"{r['prompt_tokens_per_call']:.0f}, {r['completion_tokens_per_call']:.0f}",
                  _f(r["cost_per_1k_calls"], ".2f"), paired] +
                 ([" / ".join(_f(v, ".2f") for k, v in r.items() if k.startswith("judge_") and k != "judge_failures")]
                  if judged else []))
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines += ["", "CR: completion rate over the calls not lost to an infrastructure error (errors), 95 % Wilson "
              "interval. ATT over successful calls. UPA over agent turns that gave an estimate (share of turns in "
              "brackets), beside two guessers on the same turns: always the initial state, always the middle of each "
              "scale. EI/TI/CI: final - initial simulator state. Cost: the agent's tokens at the config's `cost` "
              "prices (- without a price). p: exact one-sided McNemar over the calls both "
              "agents played (same profile, same per-dialogue seed), better = this agent succeeded where the "
              "first failed."]
    return "\n".join(lines) + "\n"


def plot_cr(rows: Sequence[Mapping], path: Path, title: str) -> None:
    """CR per row with its 95 % interval as asymmetric error bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [r["agent"] + (f"\n{r['user_set']}" if r.get("user_set") else "") for r in rows]
    cr = [r["cr"] if r["cr"] is not None else float("nan") for r in rows]
    err = [[c - r["cr_low"] if r["cr"] is not None else 0 for c, r in zip(cr, rows)],
           [r["cr_high"] - c if r["cr"] is not None else 0 for c, r in zip(cr, rows)]]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.4 * len(rows) + 1.5), 4.2), constrained_layout=True)
    ax.errorbar(range(len(rows)), cr, yerr=err, fmt="o", capsize=5)
    ax.set_xticks(range(len(rows)), labels, rotation=20 if len(rows) > 3 else 0, ha="right" if len(rows) > 3 else "center",
                  fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("completion rate (95 % Wilson interval)")
    ax.set_title(textwrap.fill(title, 80), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_compare(rows: Sequence[Mapping], out_dir: Path, title: str) -> list[Path]:
    """compare.json (the rows), compare.md and compare.png in out_dir; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "compare.json", out_dir / "compare.md", out_dir / "compare.png"]
    paths[0].write_text(json.dumps(list(rows), indent=2))
    paths[1].write_text(format_markdown(rows, title))
    plot_cr(rows, paths[2], title)
    return paths
