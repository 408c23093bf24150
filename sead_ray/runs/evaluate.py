"""`sead-ray eval`, `compare` and `judge`: a fixed profile set played once against the frozen simulator,
several agents on the same set, a judge model's scores; the simulator pool alone (simcheck) and a local
agent engine (the viewer's talk page)."""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from sead_ray.core.config import SeadConfig, config_to_dict, dump_config
from sead_ray.core.jsonl import write_jsonl
from sead_ray.core.models import resolve_model
from sead_ray.evaluation.metrics import compute_metrics, format_table
from sead_ray.play.rollout import run_dialogues, write_dialogues
from sead_ray.runs.cluster import connect
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import Scenario
from sead_ray.user.simulators import user_on_engine

if TYPE_CHECKING:
    from actors.rollout_roles import EvaluationRoles

log = logging.getLogger(__name__)



def evaluation_fingerprint(cfg: SeadConfig, scenario: Scenario, agent_model: str, profiles: Sequence[Profile]) -> str:
    """What an evaluation's calls depend on: the settings, the profiles and the agent's weights (a run's
    latest checkpoint as it is now). Endpoints have no weights to name: their fingerprint never repeats."""
    import hashlib

    from sead_ray.agent.backends import agent_backend
    identity = agent_backend(agent_model).identity(cfg, agent_model)
    if identity is None:
        return f"endpoint {time.time_ns()}"
    text = json.dumps([config_to_dict(cfg), identity, [p.to_json(scenario.schema) for p in profiles]], sort_keys=True)
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
    from actors.rollout_roles import EvaluationRoles
    holder = kept_roles or EvaluationRoles(cfg, scenario)
    roles = await holder.play(agent_model, out_dir)
    retried_before = roles.users.retried_turns
    try:
        result = await run_dialogues(roles.endpoints(), cfg, scenario, profiles, iteration=0, phase="eval",
                                     training=False)
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
               "user": cfg.models.user if user_on_engine(cfg.user) else cfg.user.backend,
               "profiles": profile_source, "decoding": cfg.dialogue.agent_eval.as_params(),
               "user_decoding": cfg.dialogue.user.as_params(), "seed": cfg.seed, "fingerprint": fingerprint}
    if cfg.user.backend == "rule":   # each won call read again by the user's own verdicts (evaluation/audit.py)
        from sead_ray.evaluation.audit import audit_won_calls
        summary["audit"] = audit_won_calls(records, scenario, cfg.user.rule.ear)
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
    if "audit" in summary:
        audit = summary["audit"]
        print(f"  audit: {audit['failed']} of {audit['won']} won calls fail it (identified, offer named, every voiced "
              "concern answered, asked after, no lie/pressure/credential/payment heard)")
        for failure in audit["failures"][:5]:
            print(f"    {failure['dialogue_id']}: {'; '.join(failure['problems'])}")
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

    from sead_ray.agent.backends import check_model_refs
    from sead_ray.agent.endpoints import endpoint_ref
    from sead_ray.evaluation.compare import agent_dir_name, agent_labels, compare_rows, write_compare
    from sead_ray.evaluation.judge import DIMENSIONS, write_judgements
    from sead_ray.evaluation.metrics import read_dialogues

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
        from actors.rollout_roles import EvaluationRoles
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
    from actors.rollout_roles import shutdown_rollout_roles, start_rollout_roles

    roles = await start_rollout_roles(cfg, scenario, cfg.models.agent, with_stats=False)
    try:
        return await use(roles.endpoints().users.respond)
    finally:
        await shutdown_rollout_roles(roles)


def local_agent_engine(cfg: SeadConfig, model_path: str) -> Any:
    """An agent engine in this process, not an actor (nothing sends it weights): `sead-ray view`'s talk page."""
    from actors.engine_sizing import engine_spec_from_config
    from actors.vllm_engine import VLLMEngine
    on_gpu = cfg.placement.agent.gpus > 0
    spec = engine_spec_from_config(cfg, "agent", model_path, cfg.seed, omp_threads_bind="" if on_gpu else "nobind")
    spec.weight_transfer_backend = ""
    return VLLMEngine(spec)


async def judge_dialogues(cfg: SeadConfig, scenario: Scenario, records: Sequence[dict], judge_model: str,
                          max_tokens: int) -> list[str]:
    """The judge's raw output for each dialogue: an endpoint (JSON-schema response format) or a local model
    on a vLLM engine actor (JSON-schema decoding)."""
    import asyncio

    from sead_ray.agent.endpoints import endpoint_client, endpoint_ref
    from sead_ray.evaluation.judge import judge_messages, judge_request_body, parse_judgement
    from sead_ray.play.rollout import Progress

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

        from actors.engine_sizing import engine_spec_from_config
        from actors.judge import JudgeActor
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
