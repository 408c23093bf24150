"""Starting and stopping runs: the one module of sead_ray that reaches into actors/ (lazily).

`train` finds where a run resumes, starts the system, runs the loop, turns Ctrl-C or SIGTERM (`ray job
stop`) into a checkpoint at the next safe point, and tears the system down whatever happened.
`evaluate` plays a fixed profile set once against the frozen simulator.
"""
from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .checkpoint import TrainState, latest_checkpoint, load_train_state, resume_conflicts, truncate_metrics
from .config import ConfigError, SeadConfig, config_to_dict, dump_config, load_config
from .controller import ProfileController
from .jsonl import write_jsonl
from .loop import SelfEvolutionLoop
from .metrics import compute_metrics, format_table
from .models import resolve_model
from .profiles import Profile, read_profiles
from .rollout import run_dialogues, write_dialogues
from .scenario import Scenario

if TYPE_CHECKING:
    from actors.system import EvaluationRoles

log = logging.getLogger(__name__)

# Ctrl-C, and what `ray job stop` (and most schedulers) send: both stop at the next safe point.
STOP_SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}


def connect(cfg: SeadConfig) -> dict:
    """Connect to the configured Ray cluster or start a local one; returns its resources."""
    from actors.system import init_ray
    return init_ray(cfg)


HELD_OUT_SEED = 104_723   # offsets the run's seed: the held-out draw is not any training draw


def held_out_profiles(cfg: SeadConfig, scenario: Scenario, run_dir: Path) -> list[Profile]:
    """The run's held-out evaluation set: drawn once (uniformly over the curriculum's states, with its own
    seed) into run_dir/eval_profiles.jsonl, read back from there on resume."""
    path = run_dir / "eval_profiles.jsonl"
    if path.exists():
        return read_profiles(path, scenario)
    curriculum = replace(cfg.curriculum, mode="uniform")
    profiles = ProfileController(scenario, curriculum, cfg.seed + HELD_OUT_SEED).sample(cfg.train.eval_profiles)
    write_jsonl(path, (p.to_json(scenario.schema) for p in profiles))
    return profiles


RUN_FILES = ("config.yaml", "metrics.jsonl", "dialogues")   # what a started run leaves before its first checkpoint


def resume_point(cfg: SeadConfig, run_dir: Path, resume: bool) -> Optional[Path]:
    """Where a run starts, decided here only: `resume`, its latest checkpoint (None: from the beginning),
    refused when `cfg` changes a key its checkpoints were made with; a new run refuses a directory that
    already holds checkpoints (it would mix two runs' metrics)."""
    checkpoint = latest_checkpoint(run_dir)
    if not resume:
        if checkpoint is not None:
            raise ConfigError(f"{run_dir} already holds a run with checkpoints: continue it with "
                              f"`sead-ray train --resume {run_dir}` or choose another --out")
        files = [name for name in RUN_FILES if (run_dir / name).exists()]
        if files:
            raise ConfigError(f"{run_dir} holds a run's files ({', '.join(files)}) but no complete checkpoint: "
                              f"`sead-ray train --resume {run_dir}` starts that run over, or choose another --out")
        return None
    if (run_dir / "config.yaml").exists():
        changed = resume_conflicts(config_to_dict(load_config(run_dir / "config.yaml")), config_to_dict(cfg))
        if changed:
            raise ConfigError(f"{run_dir}: cannot resume with {', '.join(changed)}: the run's checkpoints were made "
                              f"with the first (start a new run with --out to change it)")
    return checkpoint


async def train(cfg: SeadConfig, scenario: Scenario, run_dir: Path, *, resume: bool = False) -> dict:
    """Run (or continue) the self-evolution loop in `run_dir`; returns a summary of the run."""
    from actors.training_system import TrainingSystem

    # Absolute: Ray Train runs its workers in a directory of its own, where a relative path would
    # silently put the checkpoints.
    run_dir = Path(run_dir).resolve()
    checkpoint = resume_point(cfg, run_dir, resume)
    run_dir.mkdir(parents=True, exist_ok=True)
    if checkpoint is not None:
        start = load_train_state(checkpoint)
        agent_model = str(checkpoint / "hf")
        log.info("resuming %s after iteration %d (policy version %d) from %s", run_dir, start.iteration,
                 start.policy_version, checkpoint)
    else:
        if resume:
            log.info("no checkpoint in %s yet: starting from the beginning", run_dir)
        agent_model = str(resolve_model(cfg.models.agent))
        start = TrainState(0, ProfileController(scenario, cfg.curriculum, cfg.seed).state_dict(), 0)
    truncate_metrics(run_dir / "metrics.jsonl", start.iteration)
    dump_config(cfg, run_dir / "config.yaml")
    summary: dict = {"run_dir": str(run_dir), "tensorboard": str(run_dir / "tensorboard"),
                     "metrics": str(run_dir / "metrics.jsonl"), "interrupted": False, "wall_s": 0.0}
    if start.iteration >= cfg.train.iterations:
        log.info("%s already finished its %d iterations: nothing to do", run_dir, cfg.train.iterations)
        return {**summary, "iterations": cfg.train.iterations, "checkpoint": str(checkpoint)}

    connect(cfg)   # (nothing above needs Ray: a finished run answers without starting it)
    held_out = held_out_profiles(cfg, scenario, run_dir) if cfg.train.eval_every else []
    # user.train: the simulator resumes from its own weights in the checkpoint
    user_model = str(checkpoint / "user" / "hf") if checkpoint is not None and cfg.user.train else None
    system = await TrainingSystem.start(cfg, scenario, agent_model, run_dir, first_iteration=start.iteration + 1,
                                        user_model=user_model)
    loop = SelfEvolutionLoop(cfg, scenario, system, run_dir, start, saved=checkpoint is not None, held_out=held_out)
    previous_handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def on_stop_signal(signum, frame):
        if loop.stop_requested:
            raise KeyboardInterrupt  # the second one: leave now
        loop.stop_requested = True
        log.warning("%s: stopping at the next safe point with a checkpoint (send it again to abort)",
                    STOP_SIGNALS[signum])
    for sig in STOP_SIGNALS:
        signal.signal(sig, on_stop_signal)
    t_run = time.perf_counter()
    try:
        if checkpoint is not None:
            await system.restore(checkpoint, start.controller, start.policy_version, start.user_policy_version)
        summary["interrupted"] = await loop.run_keeping_progress()
        summary["wall_s"] = time.perf_counter() - t_run
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        await system.stop()
    checkpoint = latest_checkpoint(run_dir)
    return {**summary, "iterations": loop.done.iteration, "checkpoint": str(checkpoint) if checkpoint else None}


def evaluation_fingerprint(cfg: SeadConfig, scenario: Scenario, agent_model: str, profiles: Sequence[Profile]) -> str:
    """What an evaluation's calls depend on: the settings, the profiles and the agent's weights (a run's
    latest checkpoint as it is now). Endpoints have no weights to name: their fingerprint never repeats."""
    import hashlib

    from .config import config_to_dict
    from .endpoint import endpoint_ref
    if endpoint_ref(agent_model):
        return f"endpoint {time.time_ns()}"
    weights = agent_model if agent_model.startswith("script:") else str(resolve_model(agent_model).resolve())
    text = json.dumps([config_to_dict(cfg), weights, [p.to_json(scenario.schema) for p in profiles]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def evaluated_before(out_dir: Path, fingerprint: str) -> bool:
    """`out_dir` already holds this evaluation, complete (its summary is written last)."""
    try:
        return json.loads((Path(out_dir) / "summary.json").read_text()).get("fingerprint") == fingerprint
    except (OSError, ValueError):
        return False


async def evaluate(cfg: SeadConfig, scenario: Scenario, agent_model: str, profiles: Sequence[Profile],
                   out_dir: Path, profile_source: str, kept_roles: Optional[EvaluationRoles] = None) -> dict:
    """Run the agent against the frozen simulator on a fixed profile set; write dialogues + summary. The
    roles are started here and stopped after, or taken from (and left running in) `kept_roles`."""
    fingerprint = evaluation_fingerprint(cfg, scenario, agent_model, profiles)
    out_dir = Path(out_dir).resolve()   # actors may run in other working directories
    out_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out_dir / "config.yaml")
    from actors.system import EvaluationRoles
    holder = kept_roles or EvaluationRoles(cfg, scenario)
    roles = await holder.play(agent_model, out_dir)
    retried_before = roles.users.retried_turns
    try:
        result = await run_dialogues(roles.endpoints(), cfg, scenario, profiles, iteration=0, phase="eval",
                                     sampling=cfg.dialogue.agent_eval)
        records = write_dialogues(out_dir / "dialogues.jsonl", result, scenario)
        await roles.users.settle()
        pool = {**roles.users.report(), "retried_turns": roles.users.retried_turns - retried_before}
        extra = {"dialogues_per_s": result.dialogues_per_s, "agent_tokens_per_s": result.agent_tokens_per_s,
                 "wall_s": result.wall_s, "pool": pool}
        await roles.stats.record_iteration.remote(0, "eval", records, extra)
    finally:
        if kept_roles is None:
            await holder.close()
    m = compute_metrics(records, scenario.schema)
    summary = {**m.headline(), "metrics": m.to_json(), **extra, "agent": agent_model,
               "user": cfg.user.backend if cfg.user.backend == "rule" else cfg.models.user,
               "profiles": profile_source, "decoding": cfg.dialogue.agent_eval.as_params(),
               "user_decoding": cfg.dialogue.user.as_params(), "seed": cfg.seed, "fingerprint": fingerprint}
    by_set = {}
    for name in sorted({r["profile"].get("user_set") for r in records} - {None}):
        by_set[name] = compute_metrics([r for r in records if r["profile"].get("user_set") == name],
                                       scenario.schema).headline()
    if by_set:
        summary["by_user_set"] = by_set
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    pool = extra["pool"]
    print(format_table(m, title=f"evaluation of {agent_model} ({len(records)} dialogues, {profile_source})", extra={
        "dialogues / s": f"{result.dialogues_per_s:.3f}",
        "agent tokens / s": f"{result.agent_tokens_per_s:.1f}",
        "user engines alive": f"{pool['alive']}/{pool['engines']} (turns retried: {pool['retried_turns']})",
        "output": str(out_dir)}))
    for name, h in by_set.items():
        print(f"  user set {name:<8} n {h['n']:>4}  CR {h['cr']:.3f}  EI/TI/CI "
              + " / ".join("-" if h[k] is None else f"{h[k]:+.2f}" for k in ("ei", "ti", "ci")))
    return summary


def compare_agents(cfg: SeadConfig, scenario: Scenario, refs: Sequence[str], profiles: Sequence[Profile],
                   source: str, out: Path, labels: Optional[Sequence[str]] = None, by: Optional[str] = None,
                   judge: Optional[str] = None) -> tuple[list[dict], str]:
    """`sead-ray compare`: every agent on the same profiles and seeds, one after another on one Ray
    connection; writes out/compare.{md,json,png} and out/agents/<i>-<label>/; returns the rows and title.
    With `judge`, each agent's calls are also judged (out/agents/<i>-<label>/judge/) and the rows get the
    judge's means (`judge_<dimension>`)."""
    import asyncio

    import ray

    from .compare import agent_dir_name, agent_labels, compare_rows, write_compare
    from .endpoint import check_model_refs, endpoint_ref
    from .judge import DIMENSIONS, write_judgements
    from .metrics import read_dialogues

    check_model_refs(cfg, refs)   # a typo or a missing key fails now, not after the first agents' hours of calls
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "profiles.jsonl", (p.to_json(scenario.schema) for p in profiles))
    labels = list(labels or agent_labels(refs))
    runs = [(label, ref, out / "agents" / agent_dir_name(i, label)) for i, (label, ref) in enumerate(zip(labels, refs))]

    records: dict = {}
    judged: dict = {}

    kept = {label for label, ref, folder in runs
            if evaluated_before(folder, evaluation_fingerprint(cfg, scenario, ref, profiles))}
    for label in kept:
        log.info("%s: evaluated before with the same weights, settings and profiles: its calls are kept", label)

    async def play_all() -> None:   # one event loop for all agents: the actors' handles live in it
        from actors.system import EvaluationRoles
        roles = EvaluationRoles(cfg, scenario)
        try:
            for label, ref, folder in runs:
                if label not in kept:
                    await evaluate(cfg, scenario, ref, profiles, folder, source, kept_roles=roles)
                records[label] = read_dialogues(folder / "dialogues.jsonl", scenario.schema)
        finally:
            await roles.close()
        for label, _, folder in runs if judge else ():
            raws = await judge_dialogues(cfg, scenario, records[label], judge, max_tokens=160)
            (folder / "judge").mkdir(exist_ok=True)
            judged[label] = write_judgements(folder / "judge", records[label], raws, judge,
                                             str(folder / "dialogues.jsonl"))
    if len(kept) < len(runs) or judge:
        connect(cfg)
    try:
        asyncio.run(play_all())
    finally:
        ray.shutdown()
    prices = {label: cfg.cost.price(ref) or cfg.cost.price(getattr(endpoint_ref(ref), "model", ref))
              for label, ref, _ in runs}
    rows = compare_rows(records, scenario.schema, by=by, prices=prices)
    for row in rows if judge else ():
        summary = judged[row["agent"]]
        row.update({f"judge_{name}": (summary[name] or {}).get("mean") for name in DIMENSIONS})
        row["judge_failures"] = summary["judge_failures"]
    title = f"{len(runs)} agents, {source}, agent temperature {cfg.dialogue.agent_eval.temperature:g}"
    write_compare(rows, out, title)
    return rows, title


async def simulator_pool(cfg: SeadConfig, scenario: Scenario, use: Callable[[Callable], Awaitable[dict]]) -> dict:
    """The configured simulator pool on Ray for the length of `use(respond)` (start_rollout_roles needs an
    agent model: the config's)."""
    from actors.system import shutdown_rollout_roles, start_rollout_roles

    roles = await start_rollout_roles(cfg, scenario, cfg.models.agent, with_stats=False)
    try:
        return await use(roles.endpoints().users.respond)
    finally:
        await shutdown_rollout_roles(roles)


def local_agent_engine(cfg: SeadConfig, model_path: str) -> Any:
    """An agent engine in this process, not an actor (nothing sends it weights): `sead-ray view`'s talk page."""
    from actors.vllm_engine import VLLMEngine, engine_spec_from_config
    on_gpu = cfg.placement.agent.gpus > 0
    spec = engine_spec_from_config(cfg, "agent", model_path, cfg.seed, omp_threads_bind="" if on_gpu else "nobind")
    spec.weight_transfer_backend = ""
    return VLLMEngine(spec)


def serve_agent(cfg: SeadConfig, scenario: Scenario, model: str, *, host: str, port: int, api_key: str,
                settings: dict) -> None:
    """`sead-ray serve`: the agent on Ray Serve until Ctrl-C or SIGTERM (actors/serve_agent.py)."""
    import sys

    from ray import serve

    from actors.serve_agent import ServeSettings, build_agent_app
    from actors.system import ACTOR_ENV
    from actors.vllm_engine import engine_kwargs, engine_spec_from_config
    from placement.groups import tensor_parallel_bundles

    path = str(resolve_model(model))
    role = cfg.placement.agent
    spec = engine_spec_from_config(cfg, "agent", path, cfg.seed)
    bundles = tensor_parallel_bundles(role, spec.tensor_parallel_size)
    env = {**ACTOR_ENV, **({} if role.gpus else {"VLLM_CPU_OMP_THREADS_BIND": "nobind"})}
    decoding = cfg.dialogue.agent_eval.as_params()
    connect(cfg)   # before the app is built: building it starts Ray if none is connected (with Ray's defaults)
    app = build_agent_app(path, scenario, api_key, ServeSettings(
        decoding=decoding, prefill=cfg.dialogue.agent_prefill, **settings), engine_kwargs(spec), bundles, env)
    serve.start(http_options={"host": host, "port": port})
    t0 = time.perf_counter()
    log.info("starting the agent %s on Ray Serve (ray.serve.llm, %s replica(s))", model,
             f"{settings['min_replicas']}-{settings['max_replicas']}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve.run(app, name="sead-agent", route_prefix="/", blocking=False)
        url = f"http://{host}:{port}/v1"
        print(f"serving {model} as model {settings['model_id']!r} at {url} (ready in {time.perf_counter() - t0:.0f} s)\n"
              f"  scenario {scenario.name}: its prompt and output format are applied here; clients send the call\n"
              f"  evaluate it: sead-ray eval --config C --agent openai:{settings['model_id']}@{url} --n 16\n"
              "  Ctrl-C stops", flush=True)
        while True:
            time.sleep(3600)
    finally:
        serve.shutdown()


async def judge_dialogues(cfg: SeadConfig, scenario: Scenario, records: Sequence[dict], judge_model: str,
                          max_tokens: int) -> list[str]:
    """The judge's raw output for each dialogue: an endpoint (JSON-schema response format) or a local model
    on a vLLM engine actor (JSON-schema decoding)."""
    import asyncio

    from .endpoint import endpoint_client, endpoint_ref
    from .judge import judge_messages, judge_request_body, parse_judgement
    from .rollout import Progress

    endpoint = endpoint_ref(judge_model)
    if endpoint is not None:
        client = endpoint_client(cfg, endpoint)
        start = client.models

        async def ask(messages: list[dict]) -> str:
            return (await client.chat(judge_request_body(endpoint.model, messages, max_tokens)))[1]

        async def close() -> None:
            await client.close()
    else:
        import ray

        from actors.judge import JudgeActor
        from actors.vllm_engine import engine_spec_from_config
        spec = engine_spec_from_config(cfg, "user", str(resolve_model(judge_model)), cfg.seed)
        connect(cfg)
        actor = JudgeActor.options(num_cpus=cfg.placement.user.cpus,
                                   num_gpus=cfg.placement.user.gpus).remote(spec)

        async def ask(messages: list[dict]) -> str:
            return await actor.judge.remote(messages, max_tokens)

        async def start() -> None:
            await actor.start.remote()

        async def close() -> None:
            ray.kill(actor, no_restart=True)

    progress = None

    async def one(record: dict) -> str:
        text = await ask(judge_messages(scenario, record))
        progress.update(parse_judgement(text) is not None)
        return text
    try:
        await start()
        progress = Progress(len(records), "judged dialogues", rate_label="scored")
        return list(await asyncio.gather(*(one(r) for r in records)))
    finally:
        if progress is not None:
            progress.close()
        await close()
