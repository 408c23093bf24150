"""The self-play's own gain, five seeds and the lr = 0 control (issue 36): what the demo's GRPO iterations add to
the warm-started agent, on the same held-out profiles and seeds, per start and user set.

    python benchmarks/self_play_gain.py                        # seeds 0-4 and the control, 33-48 min a seed on 2 cores
    python benchmarks/self_play_gain.py --seeds 0 --no-control --set train.iterations=2
    python benchmarks/self_play_gain.py --report-only          # read the runs already in --out
    python benchmarks/self_play_gain.py --report-only --held-out-n 64   # and a second, larger held-out draw

Each run is `sead-ray train` of configs/embedded.yaml (train.warm_start on, its held-out evaluations at
train.eval_depths and train.eval_user_sets); the control is seed 0 with train.lr = 0 (warm start, then no update:
the rehearsal keeps its own rate, so the control is the warm-started agent replaying self-play without a step; the
loop takes none at lr 0). It starts from seed 0's warm start when --out holds one (the same rehearsal; see
branch_from_warm_start), unless --control-from-scratch. `--warm-start-from DIR` starts each seed the same way from
DIR/seedK's warm start: a recipe that changes only what comes after the rehearsal (train.kl_coef, the iterations,
...) is tried without rehearsing again; a key the rehearsal depends on (the seed, the scenario, the models) stops the
resume with the key named.
The held-out calls after the warm start (iteration 0) and after the last iteration are the same profiles with the
same seeds: an exact one-sided McNemar test per run, start and user set, and over the user sets pooled. A gain is
claimed for a start only where p < 0.05 in at least 4 of 5 seeds and not in the control. Every won call of the
last evaluation is audited from the rule user's own verdicts (sead_ray.evaluation.audit); the count of won calls
failing it must be 0. The cold start is also held to issue 51's bars, per seed: the trained agent wins at least 0.8
of what the honest script (the rehearsal's teacher, played on the run's own held-out owners by `sead-ray eval`)
wins pooled, 0.6 on hard owners alone, and answers at least 0.8 of the concerns voiced to it. Writes
OUT/self_play_gain.{json,md}.

`--held-out-n N` adds a second held-out draw, larger than the runs' own: N fresh owners per user set of
train.eval_user_sets, drawn with --held-out-seed (none of the runs' draws), played cold by each run's warm-started
checkpoint (iter_0000) and its last one with `sead-ray compare` (same profiles, same per-call seeds, greedy) into
OUT/held-out-SEED/RUN; tested and audited as the start `cold-fresh`.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ALPHA, SEEDS_NEEDED = 0.05, 4
# issue 51: the trained agent's cold wins as a share of the honest script's, pooled and on hard owners; its answer rate
OF_SCRIPT = {"pooled": 0.8, "hard": 0.6}
ANSWER_RATE = 0.8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "embedded.yaml"))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key in every run")
    p.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds of the trained runs")
    p.add_argument("--no-control", action="store_true", help="leave out the lr = 0 control")
    p.add_argument("--control-from-scratch", action="store_true",
                   help="rehearse the control itself, not from seed 0's warm start in --out (the same rehearsal)")
    p.add_argument("--warm-start-from", metavar="DIR",
                   help="start each seed K from DIR/seedK's warm start (its rehearsal, held-out draw and first "
                        "evaluation), the --set keys applied on resume")
    p.add_argument("--out", default="runs/self-play-gain", help="parent folder of the runs")
    p.add_argument("--report-only", action="store_true", help="train nothing: read the runs already in --out")
    p.add_argument("--held-out-n", type=int, default=0, metavar="N",
                   help="also test each run on N fresh owners per user set (sead-ray compare; see above)")
    p.add_argument("--held-out-seed", type=int, default=2026, help="seed of that draw and of its calls")
    return p.parse_args()


def train(config: str, overrides: list[str], run_dir: Path, on_resume: tuple[str, ...] = ()) -> float:
    """One run, resumed where an earlier call left it (a finished run resumes to nothing). A resumed run reads its
    overrides from its own config.yaml (given again, a relative path among them would resolve against the run's
    folder, not the config's) and `on_resume` on top."""
    cmd = [sys.executable, "-m", "sead_ray.cli.main", "train"]
    if (run_dir / "config.yaml").exists():
        cmd += ["--resume", str(run_dir)]
        for item in on_resume:
            cmd += ["--set", item]
    else:
        cmd += ["--config", config, "--out", str(run_dir)]
        for item in overrides:
            cmd += ["--set", item]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    return time.perf_counter() - t0


def branch_from_warm_start(seed0: Path, control: Path) -> bool:
    """Start the control from seed 0's warm start, which is the control's own (same seed, same config, the
    rehearsal at its own rate): its rehearsed checkpoint, held-out draw, evaluation after the warm start and the
    honest script's calls on that draw, linked, not copied. The control then resumes after iteration 0 with
    train.lr = 0 (about 14 minutes of rehearsal and evaluation not played twice). False, and nothing done, when the
    control already started or seed 0 has no rehearsed checkpoint. (`--warm-start-from` branches a seed from another
    folder's same seed the same way, resuming with the recipe's keys.)"""
    import os
    import shutil

    from sead_ray.training.checkpoint import checkpoint_dir, checkpoints_dir, truncate_metrics
    rehearsed = checkpoint_dir(seed0, 0)
    if (control / "config.yaml").exists() or not (rehearsed / "state.json").exists():
        return False
    checkpoints_dir(control).mkdir(parents=True)
    shutil.copytree(rehearsed, checkpoints_dir(control) / rehearsed.name, copy_function=os.link)
    (checkpoints_dir(control) / "latest").symlink_to(rehearsed.name)
    (control / "dialogues").mkdir()
    for path in [*seed0.glob("dialogues/eval_0000*.jsonl"), seed0 / "dialogues" / "warm_start.jsonl",
                 seed0 / "eval_profiles.jsonl", seed0 / "metrics.jsonl"]:
        if path.exists():
            shutil.copy2(path, control / path.relative_to(seed0))
    truncate_metrics(control / "metrics.jsonl", 0)    # seed 0's rows up to its warm start
    if (seed0 / "script-honest").exists():
        shutil.copytree(seed0 / "script-honest", control / "script-honest")
    shutil.copy2(seed0 / "config.yaml", control / "config.yaml")   # train.lr = 0 is set on resume
    return True


def same_scenario(source: Path, config: str, overrides: list[str]) -> None:
    """Stop before branching from a run rehearsed on another scenario than the one asked for (the config's, or
    --set scenario=, read from the config's folder as `sead-ray train` reads it)."""
    from sead_ray.core.config import load_config
    from sead_ray.runs.inputs import load
    if not (source / "config.yaml").exists():
        return
    theirs = load_config(source / "config.yaml").scenario   # stored absolute
    asked = Path(load(config, overrides)[1].source)          # a path that names no file: the config's own error
    if Path(theirs).read_bytes() != asked.read_bytes():
        sys.exit(f"--warm-start-from: {source} was rehearsed on {theirs}, not on {asked}")


def eval_files(run_dir: Path) -> dict[str, tuple[Path, Path]]:
    """Per start ('cold', 'd0', ...): the held-out file after the warm start and after the last iteration."""
    out = {}
    for first in sorted((run_dir / "dialogues").glob("eval_0000*.jsonl")):
        suffix = first.name[len("eval_0000"):-len(".jsonl")]
        later = sorted(p for p in (run_dir / "dialogues").glob(f"eval_*{suffix}.jsonl")
                       if p.name[5:9].isdigit() and p.name[9:-len(".jsonl")] == suffix and p != first)
        if later:
            out["cold" if not suffix else suffix[1:]] = (first, later[-1])
    return out


def run_gain(run_dir: Path, fresh: tuple[Path, Path] | None = None) -> dict:
    """Per start and user set: won before/after, the McNemar test, and the audit of the last evaluation's wins;
    `fresh`: the second held-out draw's (before, after) dialogues, as the start `cold-fresh`."""
    from sead_ray.core.config import load_config
    from sead_ray.scenario.scenario import load_scenario
    cfg = load_config(str(run_dir / "config.yaml"), [])
    scenario = load_scenario(cfg.resolve_path(cfg.scenario))
    pairs = {start: (first, last, int(last.name[5:9])) for start, (first, last) in eval_files(run_dir).items()}
    if fresh is not None:
        pairs["cold-fresh"] = (*fresh, last_iteration(run_dir))
    gains = {start: gain(first, last, iteration, scenario, cfg.user.rule.ear)
             for start, (first, last, iteration) in pairs.items()}
    if "cold" in gains:
        gains["cold"]["teacher"] = against_the_script(pairs["cold"][1], script_baseline(run_dir))
    return gains


def script_baseline(run_dir: Path) -> Path:
    """The honest script on the run's own held-out owners, cold (`sead-ray eval`, once): its dialogues file."""
    out = run_dir / "script-honest"
    if not (out / "summary.json").exists():
        subprocess.run([sys.executable, "-m", "sead_ray.cli.main", "eval", "--config", str(run_dir / "config.yaml"),
                        "--agent", "script:honest", "--profiles", str(run_dir / "eval_profiles.jsonl"),
                        "--depth", "cold", "--out", str(out)], check=True, cwd=ROOT)
    return out / "dialogues.jsonl"


def against_the_script(after_file: Path, script_file: Path) -> dict:
    """The trained agent's cold wins as a share of the script's (pooled, hard owners) and its answer rate."""
    from sead_ray.evaluation.metrics import answers, read_dialogues
    after, script = read_dialogues(after_file), read_dialogues(script_file)

    def won(records: list[dict], user_set: str) -> int:
        return sum(r["outcome"] == "success" for r in records if user_set == "pooled"
                   or r["profile"].get("user_set") == user_set)
    share = {s: won(after, s) / won(script, s) if won(script, s) else None for s in OF_SCRIPT}
    answered, asked = answers(after)
    rate = answered / asked if asked else None
    met = all(share[s] is not None and share[s] >= bar for s, bar in OF_SCRIPT.items()) and \
        rate is not None and rate >= ANSWER_RATE
    return {"script_won": {s: won(script, s) for s in OF_SCRIPT}, "of_script": share, "answer_rate": rate,
            "bars_met": met}


def gain(first: Path, last: Path, iteration_after: int, scenario, ear: str) -> dict:
    """One start: per user set (and pooled), won before/after and the exact one-sided McNemar test; the audit of
    the later calls' wins."""
    from sead_ray.evaluation.audit import audit_won_calls
    from sead_ray.evaluation.compare import paired_test
    from sead_ray.evaluation.metrics import read_dialogues
    before, after = read_dialogues(first), read_dialogues(last)
    user_sets = sorted({r["profile"].get("user_set") or "" for r in before})
    picks = {user_set or "all": [i for i, r in enumerate(before) if (r["profile"].get("user_set") or "") == user_set]
             for user_set in user_sets}
    if len(user_sets) > 1:     # the held-out set as a whole: what the start's claim is about
        picks["pooled"] = list(range(len(before)))
    by_set = {}
    for name, pick in picks.items():
        b, a = [before[i] for i in pick], [after[i] for i in pick]
        by_set[name] = {"n": len(pick), "won_before": sum(r["outcome"] == "success" for r in b),
                        "won_after": sum(r["outcome"] == "success" for r in a), **paired_test(b, a)}
    return {"by_user_set": by_set, "iteration_after": iteration_after,
            "audit": audit_won_calls(after, scenario, ear)}


def last_iteration(run_dir: Path) -> int:
    return max(int(p.name[5:]) for p in (run_dir / "checkpoints").glob("iter_*") if (p / "state.json").exists())


def fresh_held_out(run_dir: Path, out_dir: Path, n: int, seed: int) -> tuple[Path, Path]:
    """The run's warm-started and last checkpoints on N fresh owners per held-out user set (`sead-ray compare`,
    skipped when out_dir already holds it): their two dialogue files."""
    from sead_ray.core.config import load_config
    cfg = load_config(str(run_dir / "config.yaml"), [])
    if not (out_dir / "compare.json").exists():
        subprocess.run([sys.executable, "-m", "sead_ray.cli.main", "compare", "--config", str(run_dir / "config.yaml"),
                        "--agents", f"{run_dir}@iter_0000", f"{run_dir}@iter_{last_iteration(run_dir):04d}",
                        "--n", str(n), "--seed", str(seed), "--user-sets", ",".join(cfg.train.eval_user_sets),
                        "--by", "user_set", "--out", str(out_dir)], check=True, cwd=ROOT)
    first, last = sorted((out_dir / "agents").iterdir())[:2]
    return first / "dialogues.jsonl", last / "dialogues.jsonl"


def claims(gains: dict[str, dict], control: str | None) -> list[str]:
    """Per start and user set: the seeds with p < ALPHA, and whether the claim holds."""
    seeds = [name for name in gains if name != control]
    lines = []
    cells = {(start, s) for g in gains.values() for start, part in g.items() for s in part["by_user_set"]}
    for start, user_set in sorted(cells):
        significant = [name for name in seeds if gains[name].get(start, {}).get("by_user_set", {})
                       .get(user_set, {}).get("p_better", 1.0) < ALPHA]
        in_control = control in gains and gains[control].get(start, {}).get("by_user_set", {}) \
            .get(user_set, {}).get("p_better", 1.0) < ALPHA
        holds = len(significant) >= min(SEEDS_NEEDED, len(seeds)) and len(seeds) >= 5 and not in_control
        lines.append(f"- start {start}, {user_set} owners: p < {ALPHA} in {len(significant)} of {len(seeds)} seeds"
                     f" ({', '.join(significant) or 'none'}); control {'also' if in_control else 'not'} significant: "
                     + ("**gain claimed**" if holds else "no claim"))
    return lines


def markdown(gains: dict[str, dict], walls: dict[str, float], control: str | None) -> str:
    lines = ["| run | start | user set | won after warm start | won after self-play | better / worse | p (one-sided) "
             "| won calls failing the audit |", "|---|---|---|---|---|---|---|---|"]
    for name, gain in gains.items():
        for start, part in gain.items():
            for user_set, c in part["by_user_set"].items():
                audit = part["audit"]
                lines.append(f"| {name} | {start} | {user_set} | {c['won_before']}/{c['n']} | {c['won_after']}/{c['n']} "
                             f"(iteration {part['iteration_after']}) | {c['better']} / {c['worse']} | "
                             f"{c['p_better']:.3g} | {audit['failed']} of {audit['won']} |")
    lines += ["", *claims(gains, control)]
    teachers = {name: g["cold"]["teacher"] for name, g in gains.items() if "teacher" in g.get("cold", {})}
    if teachers:
        lines += ["", f"| run | cold wins / the honest script's, pooled (bar {OF_SCRIPT['pooled']}) | hard owners "
                  f"(bar {OF_SCRIPT['hard']}) | answer rate (bar {ANSWER_RATE}) | bars |", "|---|---|---|---|---|"]
        for name, t in teachers.items():
            share, rate = t["of_script"], t["answer_rate"]
            lines.append(f"| {name} | {fmt(share['pooled'])} | {fmt(share['hard'])} | {fmt(rate)} | "
                         f"{'met' if t['bars_met'] else 'not met'} |")
        met = [name for name, t in teachers.items() if t["bars_met"] and name != control]
        lines.append(f"\nissue 51's bars met in {len(met)} of {len([n for n in teachers if n != control])} seeds "
                     f"({', '.join(met) or 'none'})")
    if walls:
        lines += ["", "wall time: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in walls.items())]
    return "\n".join(lines) + "\n"


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> int:
    args = parse_args()
    out = Path(args.out)
    # run folder -> overrides; the control is seed 0 without updates
    runs = {f"seed{k}": [f"seed={k}"] for k in (int(s) for s in args.seeds.split(",") if s.strip())}
    control = None if args.no_control else "control"
    if control:
        runs[control] = ["seed=0", "train.lr=0"]
    walls = {}
    for name, extra in runs.items():
        if args.report_only:
            continue
        on_resume: tuple[str, ...] = ("train.lr=0",) if name == control else ()
        if name == control and not args.control_from_scratch and branch_from_warm_start(out / "seed0", out / name):
            print(f"{out / name}: the control starts from {out / 'seed0'}'s warm start", flush=True)
        elif name != control and args.warm_start_from:
            source = Path(args.warm_start_from) / name
            same_scenario(source, args.config, args.overrides)
            if branch_from_warm_start(source, out / name):
                print(f"{out / name}: starts from {source}'s warm start", flush=True)
            # the source's scenario stands (checked the same above): given again it would resolve against the run
            on_resume = tuple(o for o in args.overrides + extra if not o.startswith("scenario="))
        walls[name] = train(args.config, args.overrides + extra, out / name, on_resume=on_resume)
    done = [name for name in runs if (out / name / "dialogues").exists()]
    fresh = {name: fresh_held_out(out / name, out / f"held-out-{args.held_out_seed}" / name, args.held_out_n,
                                  args.held_out_seed) for name in done} if args.held_out_n else {}
    gains = {name: run_gain(out / name, fresh.get(name)) for name in done}
    text = markdown(gains, walls, control)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "self_play_gain.md").write_text(text)
    (out / "self_play_gain.json").write_text(json.dumps({"gains": gains, "wall_s": walls}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
