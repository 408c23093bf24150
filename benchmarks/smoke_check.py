"""Did a smoke run prove the weight path? (sead_ray/evaluation/smoke.py says what each line checks.)

    sead-ray train --config configs/smoke_qwen2.5_0.5b_2gpu.yaml --out /shared/runs/smoke
    python benchmarks/smoke_check.py /shared/runs/smoke          # one line per check; exit 1 when one fails

The tolerance of the logprob check follows the run's models.dtype (--tolerance overrides it).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sead_ray.core.config import load_config  # noqa: E402
from sead_ray.evaluation.smoke import MISMATCH_TOLERANCE, smoke_checks  # noqa: E402


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="the smoke run's directory (`sead-ray train --out`)")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="mean logprob mismatch accepted in iteration 2 (default: by the run's models.dtype)")
    args = parser.parse_args(argv)
    if not (args.run_dir / "config.yaml").exists():
        parser.error(f"{args.run_dir}: not a sead-ray run directory (no config.yaml)")
    cfg = load_config(args.run_dir / "config.yaml")
    tolerance = args.tolerance if args.tolerance is not None else MISMATCH_TOLERANCE[cfg.models.dtype]
    checks = smoke_checks(read_jsonl(args.run_dir / "metrics.jsonl"),
                          read_jsonl(args.run_dir / "dialogues" / "iter_0002.jsonl"), tolerance)
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if not c.ok]
    print(f"smoke: {'FAILED: ' + ', '.join(failed) if failed else 'the weight path carried version 1 to the engines'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
