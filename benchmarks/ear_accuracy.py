"""How the rule user's ears hear a scenario's ear lines (configs/scenarios/*.ear_lines.yaml, held-out caller lines
written to test them), side by side: per class the share heard as meant and the false alarms, with 95 % intervals,
and the cost of a turn. Fact lines are heard as the answer to their fact's question, held to the fact as the rule user
holds them (sead_ray.user.rule.fact_check); `swap` is each fact's lies heard that way: "heard as meant" = not taken as the
answer.

    python benchmarks/ear_accuracy.py                                   # both shipped scenarios, both ears
    python benchmarks/ear_accuracy.py --scenario configs/scenarios/charity_donation.yaml --misses --json ear.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sead_ray.evaluation.ear_accuracy import accuracy_table  # noqa: E402
from sead_ray.scenario.ear_lines import ear_lines_path, load_ear_lines  # noqa: E402
from sead_ray.scenario.scenario import load_scenario  # noqa: E402
from sead_ray.user.rule.ears import EARS  # noqa: E402
from sead_ray.user.rule.fact_check import scenario_bounds  # noqa: E402

SCENARIOS = ["configs/scenarios/restaurant_promotion.yaml", "configs/scenarios/charity_donation.yaml"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", action="append", help="scenario file(s) with an .ear_lines.yaml beside them")
    p.add_argument("--ears", default="lexicon,semantic")
    p.add_argument("--lines-dir", default=None,
                   help="read SCENARIO.ear_lines.yaml from this folder instead of beside the scenario (a second set)")
    p.add_argument("--misses", action="store_true", help="print every line an ear got wrong")
    p.add_argument("--fact-check", choices=("on", "off"), default="on",
                   help="off: fact lines and swaps heard as before issue 50 (by the ear alone, not held to their fact)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    out: dict = {}
    for path in args.scenario or SCENARIOS:
        scenario = load_scenario(str(ROOT / path) if not Path(path).is_absolute() else path)
        lines = load_ear_lines(scenario.source, len(scenario.facts), args.lines_dir)
        if lines is None:
            print(f"{path}: no {ear_lines_path(scenario.source).name} in {args.lines_dir or 'its folder'}",
                  file=sys.stderr)
            return 2
        labelled = lines.labelled()
        tables, cost = {}, {}
        for name in args.ears.split(","):
            t0 = time.perf_counter()
            ear = EARS.get(name)(scenario.rule_user, scenario.facts)
            build_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            tables[name] = accuracy_table(ear, labelled, expected=True,
                                          bounds=scenario_bounds(scenario)
                                          if args.fact_check == "on" else ())
            cost[name] = {"build_s": round(build_s, 2),
                          "ms_per_line": round(1000 * (time.perf_counter() - t0) / len(labelled), 1)}
        print(f"\n## {Path(path).name}: {len(labelled)} labelled lines\n")
        print("| class | n | " + " | ".join(f"{e} heard as meant | {e} false alarms" for e in tables) + " |")
        print("|---|---|" + "---|---|" * len(tables))
        for label, row in next(iter(tables.values())).items():
            cells = []
            for table in tables.values():
                r = table[label]
                cells.append(f"{r['correct']:.2f} [{r['correct_ci'][0]:.2f}, {r['correct_ci'][1]:.2f}] | "
                             f"{r['false_alarms']:.2f}")
            print(f"| {label} | {row['n']} | " + " | ".join(cells) + " |")
        print("\ncost: " + "; ".join(f"{e} {c['build_s']} s to build, {c['ms_per_line']} ms a line (uncached)"
                                    for e, c in cost.items()))
        if args.misses:
            for name, table in tables.items():
                for label, row in table.items():
                    for text in row["misses"]:
                        print(f"  miss [{name}] {label}: {text}")
        out[Path(path).name] = {"tables": tables, "cost": cost}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
