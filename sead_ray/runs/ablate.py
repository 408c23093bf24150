"""`sead-ray ablate`: the paper's ablations as config variants plus one runner. Each variant and seed is
trained by `sead-ray train` (its own process and Ray session: a crashed or stopped variant resumes where it
stopped when the command is run again), then `compare` plays every trained agent on one fixed profile set
and writes the ablation table.

Variants (the paper's Table 3):
- full       the method as configured
- wo_ma      without Mistake Analysis: initial states drawn uniformly over the grid, no curriculum
- wo_ma_ps   without Mistake Analysis and without Profile Sampling: the simulator gets no sampled state
             at all (free-form profiles: it picks its own starting mood)
- train_urm  the simulator trained too, against the agent (symmetric self-play): a second trainer group
             runs GRPO on the simulator's turns with the opposite of the agent's outcome reward
             (`user.train`, which needs the LLM simulator). Two trainer groups need twice the
             trainer resources (on the 2-core embedded default: one worker each, see docs/results.md).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

VARIANTS: dict[str, list[str]] = {
    "full": [],
    "wo_ma": ["curriculum.mode=uniform"],
    "wo_ma_ps": ["curriculum.mode=uniform", "curriculum.profile_sampling=false"],
    "train_urm": ["user.backend=vllm", "user.train=true"],
}


def parse_variants(text: str) -> list[str]:
    from sead_ray.runs.inputs import UsageError
    names = [v.strip() for v in text.split(",") if v.strip()]
    for name in names:
        if name not in VARIANTS:
            raise UsageError(f"--variants: unknown variant {name!r}; available: {', '.join(VARIANTS)}")
    if not names or len(set(names)) != len(names):
        raise UsageError(f"--variants: a comma-separated list of distinct variants from {', '.join(VARIANTS)}")
    return names


def parse_seeds(text: str) -> list[int]:
    from sead_ray.runs.inputs import UsageError
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds {text!r}: comma-separated integers, e.g. 0,1,2") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds {text!r}: distinct integers >= 0")
    return seeds


def train_command(config: str, overrides: list[str], run_dir: Path) -> list[str]:
    """`sead-ray train` of one variant, or `--resume` when the run directory already holds that run."""
    cli = [sys.executable, "-m", "sead_ray.cli.main", "train"]
    if (run_dir / "config.yaml").exists():
        return [*cli, "--resume", str(run_dir)]
    sets = [arg for o in overrides for arg in ("--set", o)]
    return [*cli, "--config", config, *sets, "--out", str(run_dir)]


def cmd_ablate(args) -> int:
    import logging

    from sead_ray.evaluation.compare import format_markdown
    from sead_ray.runs.evaluate import compare_agents
    from sead_ray.runs.inputs import check_out, evaluation_profiles, load

    log = logging.getLogger("sead_ray")
    variants, seeds = parse_variants(args.variants), parse_seeds(args.seeds)
    out = check_out(Path(args.out), "dir")
    cfg, scenario = load(args.config, args.overrides)   # checked before hours of training
    for name in variants:
        load(args.config, [*args.overrides, *VARIANTS[name]])
    runs = []
    for name in variants:
        for seed in seeds:
            run_dir = out / "runs" / f"{name}-s{seed}"
            command = train_command(args.config, [*args.overrides, *VARIANTS[name], f"seed={seed}"], run_dir)
            log.info("ablation %s, seed %d: %s", name, seed, " ".join(command[2:]))
            if subprocess.run(command).returncode != 0:
                log.error("ablation %s, seed %d did not finish; run the same command again to resume it", name, seed)
                return 1
            runs.append((f"{name}-s{seed}", str(run_dir)))
    profiles, source = evaluation_profiles(args, cfg, scenario)
    rows, title = compare_agents(cfg, scenario, [ref for _, ref in runs], profiles, source, out / "compare",
                                 labels=[label for label, _ in runs])
    table = format_markdown(rows, f"ablations ({', '.join(variants)}; seeds {args.seeds}): {title}")
    (out / "ablation.md").write_text(table)
    print(table + f"\nwritten to {out / 'ablation.md'} and {out / 'compare'}")
    return 0
