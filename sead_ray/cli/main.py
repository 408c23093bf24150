"""`sead-ray`: the command-line entry point.

Exit codes: 0 success, 1 runtime failure, 2 bad input (config, scenario, dialogues file, arguments).
"""
from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from sead_ray.cli.agent_commands import cmd_compare, cmd_eval, cmd_judge, cmd_serve, cmd_simcheck
from sead_ray.cli.args import build_parser
from sead_ray.core.config import ConfigError
from sead_ray.ops.monitor import cmd_monitor
from sead_ray.runs.ablate import cmd_ablate
from sead_ray.runs.inputs import (
    UsageError,
    check_out,
    load,
    sample_profiles,
    write_profiles,
)
from sead_ray.user.simulators import user_on_engine
from sead_ray.view.app import cmd_view

log = logging.getLogger("sead_ray")


def cmd_models(args) -> int:
    from sead_ray.core.models import list_models, prepare_embedded, prepare_tiny
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


def cmd_profiles_sample(args) -> int:
    cfg, scenario = load(args.config, args.overrides)
    seed = cfg.seed if args.seed is None else args.seed
    out = check_out(Path(args.out), "file")
    profiles = sample_profiles(cfg, scenario, args.n, seed)
    try:
        write_profiles(out, profiles, scenario)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write ({exc.strerror})") from None
    log.info("wrote %d profiles (seed %d, %d distinct initial states) to %s",
             len(profiles), seed, len({p.state for p in profiles}), args.out)
    return 0


def cmd_train(args) -> int:
    import asyncio
    import time

    import ray

    from sead_ray.runs.train import train
    from sead_ray.training.checkpoint import RunDirectoryBusy, run_dir_lock

    if args.resume:
        run_dir = Path(args.resume)
        config_path = args.config or run_dir / "config.yaml"
        if not Path(config_path).exists():
            raise UsageError(f"{run_dir}: not a sead-ray run directory (no config.yaml)")
    elif args.config:
        config_path = args.config
    else:
        raise UsageError("train needs --config FILE (or --resume RUN_DIR)")
    cfg, scenario = load(str(config_path), args.overrides)
    if not args.resume:
        run_dir = check_out(Path(args.out or Path(cfg.output_dir) / time.strftime("run-%Y%m%d-%H%M%S")), "dir",
                             "--out" if args.out else "run directory")
    try:
        # where the run starts is decided inside (runs.train.resume_point), under the lock, before Ray starts
        with run_dir_lock(run_dir):
            try:
                summary = asyncio.run(train(cfg, scenario, run_dir, resume=bool(args.resume)))
            finally:
                ray.shutdown()
    except RunDirectoryBusy as exc:
        raise UsageError(str(exc)) from None
    report = _write_report_quietly(Path(summary["run_dir"]), scenario, summary.get("checkpoint"))
    state = "stopped early" if summary.get("interrupted") else "finished"
    from sead_ray.evaluation.report import print_learning
    print_learning(Path(summary["run_dir"]))
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


def _write_report_quietly(run_dir: Path, scenario, checkpoint: Optional[str]) -> Optional[Path]:
    """The end-of-run report; a plotting problem must not turn a finished run into a failed command."""
    from sead_ray.evaluation.made_up import scenario_sentences
    from sead_ray.evaluation.report import ReportError, write_report
    try:
        return write_report(run_dir, scenario.schema, checkpoint, scenario_sentences(scenario))[0].parent
    except ReportError:
        return None
    except Exception as exc:  # e.g. matplotlib missing or failing: the run itself is fine
        logging.getLogger(__name__).warning("could not write the report: %r (retry: sead-ray report %s)", exc, run_dir)
        return None


def cmd_report(args) -> int:
    from sead_ray.evaluation.made_up import scenario_sentences
    from sead_ray.evaluation.report import ReportError, write_report
    from sead_ray.training.checkpoint import latest_checkpoint
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").exists():
        raise UsageError(f"{run_dir}: not a sead-ray run directory (no config.yaml)")
    _, scenario = load(str(run_dir / "config.yaml"), [])
    checkpoint = latest_checkpoint(run_dir)
    try:
        files = write_report(run_dir, scenario.schema, str(checkpoint) if checkpoint else None,
                             scenario_sentences(scenario))
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    for f in files:
        print(f)
    return 0


def cmd_plan(args) -> int:
    from sead_ray.ops.memory_plan import device_memory_bytes, fit_problems, format_plan, plan_roles
    from sead_ray.ops.model_shape import reference_shape
    cfg, _ = load(args.config, args.overrides)

    def shape(reference: str):
        try:
            return reference_shape(reference)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    user = shape(cfg.models.user) if user_on_engine(cfg.user) else None
    agent, device = shape(cfg.models.agent), device_memory_bytes(cfg)
    print(format_plan(cfg, agent, user, device))
    problems = fit_problems(plan_roles(cfg, agent, user, device), cfg, agent, device)
    if problems:   # a config that would run out of GPU memory mid-run is refused before anything starts
        raise UsageError(f"{args.config}: " + "; ".join(problems))
    return 0


def cmd_doctor(args) -> int:
    import asyncio
    import time

    import ray

    from sead_ray.runs.doctor import diagnose
    t0 = time.perf_counter()
    try:
        checks = asyncio.run(diagnose(args.config, args.overrides))
    finally:
        ray.shutdown()
    print(checks.summary(time.perf_counter() - t0))
    return 0 if checks.failed is None else 2


def cmd_metrics(args) -> int:
    from sead_ray.evaluation.metrics import DialogueFileError, compute_metrics, format_table, read_dialogues

    if args.overrides and not args.config:
        raise UsageError("metrics: --set changes a config, and no --config was given")
    schema = load(args.config, args.overrides)[1].schema if args.config else None
    try:
        records = read_dialogues(args.file, schema)
    except DialogueFileError as exc:
        raise UsageError(str(exc)) from None
    m = compute_metrics(records, schema)
    if args.json:
        try:
            text = json.dumps(m.headline(), allow_nan=False)
        except ValueError:   # never print invalid JSON (e.g. sums of huge states overflowing to inf)
            raise UsageError(f"{args.file}: the metrics are not finite numbers: {m.headline()}") from None
        print(text)
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
        "compare": cmd_compare,
        "simcheck": cmd_simcheck,
        "train": cmd_train,
        "report": cmd_report,
        "plan": cmd_plan,
        "doctor": cmd_doctor,
        "monitor": cmd_monitor,
        "serve": cmd_serve,
        "judge": cmd_judge,
        "ablate": cmd_ablate,
        "view": cmd_view,
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
        from sead_ray.core.models import ModelError
        from sead_ray.training.checkpoint import CheckpointError
        from sead_ray.training.trainer_protocol import TrainerError
        # faults the run reports in words (TimeoutError: a role that stopped answering)
        if isinstance(exc, (ModelError, PlacementError, TrainerError, CheckpointError, TimeoutError)):
            print(f"sead-ray: error: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
