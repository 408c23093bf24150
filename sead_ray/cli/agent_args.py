"""The parsers of the commands that play, judge, serve and watch an agent (eval, compare, simcheck, serve, judge, view,
monitor); sead_ray.cli.args builds the whole parser, with the commands of a training run."""
from __future__ import annotations

import argparse
from typing import Any

from sead_ray.agent.scripted import ALL_CLASSES, HONEST
from sead_ray.cli.arg_types import add_config_args, add_profile_set_args, count, seed


def eval_command(sub: Any) -> None:
    ev = sub.add_parser(
        "eval", help="run an agent against the frozen user simulator and print the paper's metrics",
        description="Evaluate an agent: every profile of a fixed set (a file, or N profiles sampled with a seed) is "
                    "called once with the config's explicit evaluation decoding (dialogue.agent_eval); the frozen "
                    "simulator (user.backend) plays the user. Prints CR, ATT +- std, UPA, EI/TI/CI, parse "
                    "failures and dialogues/s, and writes dialogues.jsonl, profiles.jsonl, summary.json and the "
                    "resolved config into --out.",
        epilog="example:\n  sead-ray eval --config configs/embedded.yaml --agent embedded:smollm2-135m-instruct "
               "--n 8 --seed 0 --out ev-smoke", formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_args(ev)
    ev.add_argument("--agent", required=True, metavar="MODEL",
                    help="agent model: HF folder, embedded:smollm2-135m-instruct, tiny:llama-h64, a run/checkpoint "
                         "directory of `sead-ray train`, openai:MODEL@URL, or script:CLASS (a scripted agent of the "
                         f"adversarial battery: {', '.join((HONEST, *ALL_CLASSES))})")
    add_profile_set_args(ev, required=False)
    ev.add_argument("--out", default=None, metavar="DIR", help="output folder (default: <output_dir>/eval-<time>)")


def compare_command(sub: Any) -> None:
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
    add_config_args(cp)
    cp.add_argument("--agents", required=True, nargs="+", metavar="MODEL",
                    help="agent models as `eval --agent` takes them; the first is the reference of the paired tests")
    add_profile_set_args(cp, required=True)
    cp.add_argument("--by", default=None, choices=["user_set"], help="also split the rows by the profiles' user set")
    cp.add_argument("--judge", default=None, metavar="MODEL",
                    help="also judge every agent's calls with this model (see `sead-ray judge`): adds its columns")
    cp.add_argument("--out", required=True, metavar="DIR", help="output folder")


def simcheck_command(sub: Any) -> None:
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
    add_config_args(sc)
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


def serve_command(sub: Any) -> None:
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
    add_config_args(sv, required=False)
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sv.add_argument("--port", type=int, default=8000, help="HTTP port")
    sv.add_argument("--model-id", default="agent", help="the model name clients send and /v1/models lists")
    sv.add_argument("--min-replicas", type=count, default=1, help="autoscaling lower bound")
    sv.add_argument("--max-replicas", type=count, default=1, help="autoscaling upper bound")
    sv.add_argument("--max-concurrent", type=count, default=8, help="requests in flight per replica")
    sv.add_argument("--max-queued", type=count, default=32, help="requests waiting beyond those; more get 429")
    sv.add_argument("--max-request-kb", type=count, default=64, help="larger request bodies get 413")


def judge_command(sub: Any) -> None:
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
    add_config_args(jd)
    jd.add_argument("--limit", type=count, default=None, help="judge the first N dialogues only")
    jd.add_argument("--max-tokens", type=count, default=160, help="the judge's output budget")
    jd.add_argument("--out", default=None, metavar="DIR", help="output folder (default: judge/ beside the file)")


def view_command(sub: Any) -> None:
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


def monitor_command(sub: Any) -> None:
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
