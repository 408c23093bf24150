"""The commands that play, judge and serve an agent (eval, compare, serve, judge, simcheck); sead_ray.cli.main runs
every command. Bad input raises ConfigError or UsageError (exit code 2)."""
from __future__ import annotations

from pathlib import Path

from sead_ray.core.config import ConfigError
from sead_ray.runs.inputs import (
    UsageError,
    check_out,
    evaluation_profiles,
    load,
    make_out_dir,
    profiles_by_user_set,
    write_profiles,
)
from sead_ray.user.simulators import user_on_engine


def cmd_eval(args) -> int:
    import asyncio
    import time

    import ray

    from sead_ray.agent.backends import check_model_refs
    from sead_ray.runs.cluster import connect
    from sead_ray.runs.evaluate import evaluate

    cfg, scenario = load(args.config, args.overrides)
    check_model_refs(cfg, [args.agent])
    profiles, source = evaluation_profiles(args, cfg, scenario)
    out = Path(args.out or Path(cfg.output_dir) / time.strftime("eval-%Y%m%d-%H%M%S"))
    make_out_dir(out, "--out" if args.out else "output folder")
    write_profiles(out / "profiles.jsonl", profiles, scenario)
    connect(cfg)
    try:
        asyncio.run(evaluate(cfg, scenario, args.agent, profiles, out, source))
    finally:
        ray.shutdown()
    return 0


def cmd_compare(args) -> int:
    from sead_ray.evaluation.compare import format_markdown
    from sead_ray.runs.evaluate import compare_agents

    cfg, scenario = load(args.config, args.overrides)
    profiles, source = evaluation_profiles(args, cfg, scenario)
    check_out(Path(args.out), "dir")
    rows, title = compare_agents(cfg, scenario, args.agents, profiles, source, Path(args.out), by=args.by,
                                 judge=args.judge)
    print(format_markdown(rows, title))
    return 0


def cmd_serve(args) -> int:
    from sead_ray.agent.endpoints import api_key_from_env
    from sead_ray.agent.serving import ServeLimits
    from sead_ray.runs.serve import serve_agent

    cfg, scenario = load(args.config, [*args.overrides, f"scenario={Path(args.scenario).resolve()}"])
    if args.min_replicas > args.max_replicas:
        raise UsageError(f"--min-replicas {args.min_replicas} > --max-replicas {args.max_replicas}")
    settings = {"model_id": args.model_id, "min_replicas": args.min_replicas, "max_replicas": args.max_replicas,
                "max_ongoing_requests": args.max_concurrent, "max_queued_requests": args.max_queued,
                "limits": ServeLimits(max_request_bytes=args.max_request_kb * 1024,
                                      max_messages=2 * cfg.dialogue.max_turns)}
    key = api_key_from_env("SEAD_RAY_API_KEY", "sead-ray serve requires an API key")
    serve_agent(cfg, scenario, args.model, host=args.host, port=args.port, api_key=key,
                settings=settings)
    return 0


def cmd_judge(args) -> int:
    import asyncio

    import ray

    from sead_ray.evaluation.judge import format_summary, write_judgements
    from sead_ray.evaluation.metrics import DialogueFileError, read_dialogues
    from sead_ray.runs.evaluate import judge_dialogues

    cfg, scenario = load(args.config, args.overrides)
    try:
        records = read_dialogues(args.dialogues, scenario.schema)[: args.limit or None]
    except DialogueFileError as exc:
        raise UsageError(str(exc)) from None
    out = make_out_dir(Path(args.out or Path(args.dialogues).parent / "judge"), "--out" if args.out else "output folder")
    try:
        raws = asyncio.run(judge_dialogues(cfg, scenario, records, args.judge, args.max_tokens))
    finally:
        if ray.is_initialized():
            ray.shutdown()
    summary = write_judgements(out, records, raws, args.judge, str(args.dialogues))
    print(format_summary(summary, f"judge {args.judge} on {args.dialogues}") + f"\nwritten to {out}")
    return 0


def cmd_simcheck(args) -> int:
    import asyncio

    from sead_ray.evaluation.simcheck import (
        add_battery,
        in_process_respond,
        run_battery,
        run_simcheck,
        untested,
        write_outputs,
    )
    from sead_ray.play.dialogue import call_settings
    from sead_ray.training.rewards import REWARDS

    cfg, scenario = load(args.config, args.overrides)
    seed = cfg.seed if args.seed is None else args.seed
    check_out(Path(args.out), "dir")
    if args.adversarial and scenario.rule_user is None:
        raise ConfigError(f"{scenario.source}: --adversarial builds its scripted agents from the scenario's "
                          "'rule_user' section, and this scenario has none")
    profiles = profiles_by_user_set(cfg, scenario, args.user_sets, args.n, seed)
    sets = [s for s in profiles if s]
    rules = call_settings(cfg, scenario)

    async def check(respond) -> dict:
        result = await run_simcheck(scenario, profiles, respond, rules=rules, seed=seed,
                                    simulator=cfg.models.user if user_on_engine(cfg.user) else cfg.user.backend,
                                    by_set=bool(sets))
        if args.adversarial:
            reward = REWARDS.get(cfg.train.reward)   # the battery reports the run's reward beside the rates
            add_battery(result, await run_battery(scenario, profiles, respond, rules, seed=seed,
                                                  reward=lambda call: reward(call, cfg.train)), untested(scenario))
        return result

    if not user_on_engine(cfg.user):   # no Ray: the simulator is called in this process
        result = asyncio.run(check(in_process_respond(cfg, scenario)))
    else:
        import ray

        from sead_ray.runs.cluster import connect
        from sead_ray.runs.evaluate import simulator_pool
        connect(cfg)
        try:
            result = asyncio.run(simulator_pool(cfg, scenario, check))
        finally:
            ray.shutdown()
    print(write_outputs(result, scenario.schema, Path(args.out)), end="")
    return 0
