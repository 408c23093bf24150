"""The demo learns, and a control that cannot learn does not: the embedded demo (configs/embedded.yaml)
trained twice on the same seed, once as configured and once with `train.lr=0` (same rollouts, same
GRPO steps, weights never move), printed side by side with each run's before/after test.

    python benchmarks/learning_control.py                       # both runs, about 2 x 18 min on 2 cores
    python benchmarks/learning_control.py --only control --set train.iterations=4

A learning claim needs both: a significant gain in the trained run and none in the control (whose
success rate can only drift by chance, since the curriculum moves the initial states it draws).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = {"trained": [], "control": ["train.lr=0"]}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "embedded.yaml"))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key in both runs")
    p.add_argument("--out", default="runs/learning-control", help="parent folder of the two runs")
    p.add_argument("--only", choices=sorted(RUNS), help="run one of the two (the other is read if present)")
    p.add_argument("--report-only", action="store_true", help="train nothing: compare the runs already in --out")
    return p.parse_args()


def train(config: str, overrides: list[str], run_dir: Path) -> float:
    cmd = [sys.executable, "-m", "sead_ray.cli.main", "train", "--config", config, "--out", str(run_dir)]
    if (run_dir / "config.yaml").exists():        # resume an interrupted run instead of starting over
        cmd = [sys.executable, "-m", "sead_ray.cli.main", "train", "--resume", str(run_dir)]
    for item in overrides:
        cmd += ["--set", item]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    return time.perf_counter() - t0


def main() -> int:
    from sead_ray.evaluation.report import learning_summary, read_metrics_rows
    args = parse_args()
    out = Path(args.out)
    walls = {}
    for name, extra in RUNS.items():
        if not args.report_only and args.only in (None, name):
            walls[name] = train(args.config, args.overrides + extra, out / name)
    summaries = {}
    for name in RUNS:
        metrics = out / name / "metrics.jsonl"
        if metrics.exists():
            summaries[name] = learning_summary(read_metrics_rows(metrics))
    print("\nsuccess rate per iteration (k/n, 95 % Wilson interval)")
    iterations = max(len(s["per_iteration"]) for s in summaries.values())
    print(f"{'iter':>4}  " + "  ".join(f"{name:<28}" for name in summaries))
    for i in range(iterations):
        cells = [s["per_iteration"][i]["text"] if i < len(s["per_iteration"]) else "" for s in summaries.values()]
        print(f"{i + 1:>4}  " + "  ".join(f"{c:<28}" for c in cells))
    for name, s in summaries.items():
        wall = f", {walls[name] / 60:.1f} min" if name in walls else ""
        print(f"\n{name}{wall}:\n{s.get('verdict_text', '(fewer than 4 iterations: no before/after test)')}")
    trained, control = summaries.get("trained"), summaries.get("control")
    if trained and control and trained["verdict"] and control["verdict"]:
        ok = trained["verdict"]["gain"] and not control["verdict"]["gain"]
        print(f"\nlearning {'shown' if ok else 'NOT shown'}: trained gain={trained['verdict']['gain']}, "
              f"control gain={control['verdict']['gain']}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
