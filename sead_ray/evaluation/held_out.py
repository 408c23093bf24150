"""The run's own test of its claim (issue 51): its held-out cold calls after the warm start against those after the
last iteration, the same owners and seeds, played greedily (`train.eval_every`; `dialogues/eval_NNNN.jsonl`). Each
owner is a pair (won before, won after); an exact one-sided McNemar test reads the owners that changed. Unlike the
training calls, whose start mix the curriculum moves, this compares like with like.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from sead_ray.evaluation.significance import mcnemar_exact_greater

_COLD = re.compile(r"eval_(\d{4})\.jsonl")    # the cold calls of one evaluation (eval_NNNN_dK: started deeper)


def _won_by_owner(path: Path) -> dict[str, tuple[bool, str]]:
    """Per held-out owner (its profile index, `pNNNN-rK` of the call's id): (won, its user set); calls that ended in
    an infrastructure error are left out."""
    out = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        call = json.loads(line)
        if call.get("error"):
            continue
        owner = "-".join(call["dialogue_id"].split("-")[1:3])
        out[owner] = (call.get("outcome") == "success", call["profile"].get("user_set") or "")
    return out


def _pairs_test(pairs: list[tuple[bool, bool]], alpha: float) -> dict:
    p = mcnemar_exact_greater(pairs)
    return {"n": len(pairs), "before": sum(a for a, _ in pairs), "after": sum(b for _, b in pairs),
            "lost_to_won": sum(not a and b for a, b in pairs), "won_to_lost": sum(a and not b for a, b in pairs),
            "p_one_sided": p, "significant": p < alpha}


def held_out_test(run_dir: Path, alpha: float = 0.05) -> Optional[dict]:
    """The first held-out evaluation against the last (pooled, and per user set), or None before there are two."""
    files = sorted((int(m.group(1)), p) for p in (Path(run_dir) / "dialogues").glob("eval_*.jsonl")
                   if (m := _COLD.fullmatch(p.name)))
    if len(files) < 2:
        return None
    (first, before_path), (last, after_path) = files[0], files[-1]
    before, after = _won_by_owner(before_path), _won_by_owner(after_path)
    owners = sorted(set(before) & set(after))
    test = {"before_iteration": first, "after_iteration": last, "alpha": alpha,
            **_pairs_test([(before[o][0], after[o][0]) for o in owners], alpha)}
    sets = sorted({before[o][1] for o in owners} - {""})
    if len(sets) > 1:
        test["by_user_set"] = {s: _pairs_test([(before[o][0], after[o][0]) for o in owners if before[o][1] == s], alpha)
                               for s in sets}
    return test


def format_held_out_test(test: dict) -> str:
    """The learning verdict, in a few lines."""
    def line(t: dict) -> str:
        p = t["p_one_sided"]
        return (f"{t['before']}/{t['n']} -> {t['after']}/{t['n']} won ({t['lost_to_won']} lost -> won, {t['won_to_lost']} "
                f"won -> lost), exact one-sided McNemar p = {p:.3g}: "
                + ("significant" if t["significant"] else "not significant") + f" at {test['alpha']:g}")
    start = "after the warm start" if test["before_iteration"] == 0 else f"after iteration {test['before_iteration']}"
    lines = [f"held-out cold calls, the same owners, greedy: {start} vs after iteration {test['after_iteration']}",
             f"  all owners: {line(test)}"]
    lines += [f"  {name} owners: {line(t)}" for name, t in test.get("by_user_set", {}).items()]
    return "\n".join(lines)
