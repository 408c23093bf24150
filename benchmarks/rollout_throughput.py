"""Rollout throughput: per-dialogue asynchronous scheduling (sead-ray) vs turn-synchronous batches
(the reference code's schedule), on the same engines and the same profiles, side by side, beside the
engines' ceiling for the same work: every request the async schedule made, replayed at once with no
dialogue dependencies (same prompts and seeds, so the same generations).

    python benchmarks/rollout_throughput.py                       # embedded SmolLM2 agent and simulator, 32 calls
    python benchmarks/rollout_throughput.py --n 16 --rounds 2 --set dialogue.max_turns=8 --json r.json
    python benchmarks/rollout_throughput.py --set user.backend=rule --set curriculum.user_set=soft   # the demo's user

The simulator is an LLM on its own engine by default (the paper's setting, and the one where the schedule
matters: in lock-step turns each engine idles while the other generates). With the demo's `rule` user, which
answers at once, both schedules keep the one agent engine about equally busy.

Prints dialogues/s, generated agent tokens/s, and the agent engine's busy fraction and mean batch (running
requests while busy, from its scheduler's own stats) for each schedule, and the ratios `async_over_turn_sync`
and `async_over_ceiling` (also the top-level keys of `--json`). Every schedule starts from a cold prefix
cache; the order alternates across rounds so none profits from warm-up.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "embedded.yaml"))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--n", type=int, default=32, help="dialogues in flight per schedule and round")
    p.add_argument("--rounds", type=int, default=2, help="repetitions (order alternates)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    return p.parse_args()


async def main(args) -> dict:
    import numpy as np
    import ray

    from actors.ray_cluster import init_ray
    from actors.rollout_roles import shutdown_rollout_roles, start_rollout_roles
    from benchmarks.turn_sync import recording_endpoints, replay, turn_sync_endpoints
    from sead_ray.core.config import load_config
    from sead_ray.play.rollout import run_dialogues
    from sead_ray.scenario.profiles import sample_profiles
    from sead_ray.scenario.scenario import load_scenario

    defaults = ["ray.dashboard=false", "dialogue.max_turns=6", "user.backend=vllm", "curriculum.user_set="]
    cfg = load_config(args.config, defaults + args.overrides)
    scenario = load_scenario(cfg.resolve_path(cfg.scenario))
    init_ray(cfg)
    roles = await start_rollout_roles(cfg, scenario, cfg.models.agent, with_stats=False)
    profiles = sample_profiles(scenario, args.n, np.random.default_rng(args.seed), n_max=cfg.curriculum.n_max)
    # Training-time decoding: sampled calls of varied length are where lock-step turns lose time.
    await run_dialogues(roles.endpoints(), cfg, scenario, profiles[:2], iteration=99, phase="warm-up", training=True)
    figures: dict = {"async": [], "turn_sync": [], "ceiling": []}

    engines = list(roles.agents.actors.values()) + list(roles.users.actors.values())

    async def cold_caches() -> None:
        """Cold prefix caches, and a new load window on every engine."""
        await asyncio.gather(*(a.reset_prefix_cache.remote() for a in engines))
        await asyncio.gather(*(a.engine_load.remote(reset=True) for a in engines))

    async def engine_load() -> dict:
        """The agent engines' busy fraction and mean running requests over the window (their scheduler's
        stats), and the simulator engines' where they are LLMs."""
        windows = await asyncio.gather(*(a.engine_load.remote() for a in engines))
        agents, users = windows[:len(roles.agents.actors)], [w for w in windows[len(roles.agents.actors):] if w]
        out = {}
        for role, ws in (("agent", agents), ("user", users)):
            if ws:
                out[f"{role}_busy_fraction"] = sum(w["busy_fraction"] for w in ws) / len(ws)
                out[f"{role}_mean_running"] = sum(w["mean_running"] for w in ws) / len(ws)
                out[f"{role}_prefix_hit_rate"] = sum(w["prefix_hit_rate"] for w in ws) / len(ws)
        return out
    try:
        for r in range(args.rounds):
            order = ("turn_sync", "async") if r % 2 == 0 else ("async", "turn_sync")
            for schedule in order:
                await cold_caches()
                calls: list = []
                endpoints = recording_endpoints(roles.endpoints(), calls)
                if schedule == "turn_sync":
                    endpoints = turn_sync_endpoints(endpoints, len(profiles))
                res = await run_dialogues(endpoints, cfg, scenario, profiles, iteration=r, phase=schedule,
                                          training=True)
                turns = sum(len(t.turns) for t in res.trajectories)
                figures[schedule].append({"wall_s": res.wall_s, "dialogues_per_s": res.dialogues_per_s,
                                          "agent_tokens_per_s": res.agent_tokens_per_s, "agent_turns": turns,
                                          "agent_tokens": res.agent_tokens, **await engine_load()})
                if schedule == "async":   # the same requests with no dependencies between them
                    await cold_caches()
                    wall = await replay(roles.endpoints(), calls)
                    figures["ceiling"].append({"wall_s": wall, "dialogues_per_s": len(profiles) / wall,
                                               "agent_tokens_per_s": res.agent_tokens / wall, "requests": len(calls),
                                               **await engine_load()})
    finally:
        await shutdown_rollout_roles(roles)
        ray.shutdown()

    def mean(schedule, key):
        return sum(f[key] for f in figures[schedule]) / len(figures[schedule])

    user_keys = ("user_busy_fraction", "user_prefix_hit_rate") if "user_busy_fraction" in figures["async"][0] else ()
    summary = {
        "n": args.n, "rounds": args.rounds, "agent": cfg.models.agent,
        "user": cfg.user.backend if cfg.user.backend == "rule" else cfg.models.user,
        "user_engines": len(roles.users.actors), "max_turns": cfg.dialogue.max_turns,
        **{f"{s}_{k}": mean(s, k) for s in figures for k in ("dialogues_per_s", "agent_tokens_per_s", "wall_s",
                                                             "agent_busy_fraction", "agent_mean_running",
                                                             "agent_prefix_hit_rate") + user_keys},
        "runs": figures,
    }
    summary["async_over_turn_sync"] = summary["async_dialogues_per_s"] / summary["turn_sync_dialogues_per_s"]
    summary["async_over_ceiling"] = summary["async_dialogues_per_s"] / summary["ceiling_dialogues_per_s"]
    print(f"\nrollout throughput: {args.n} dialogues x {args.rounds} round(s), agent {summary['agent']}, "
          f"user {summary['user']} x {summary['user_engines']}, T_max {summary['max_turns']}")
    print(f"{'schedule':<22}{'dialogues/s':>14}{'agent tokens/s':>17}{'wall s':>10}{'agent busy':>12}"
          f"{'mean batch':>12}{'prefix hits':>13}" + (f"{'user busy':>11}{'user prefix hits':>18}" if user_keys else ""))
    for s, label in (("async", "per-dialogue async"), ("turn_sync", "turn-synchronous"),
                     ("ceiling", "replay (ceiling)")):
        print(f"{label:<22}{summary[s + '_dialogues_per_s']:>14.4f}{summary[s + '_agent_tokens_per_s']:>17.1f}"
              f"{summary[s + '_wall_s']:>10.1f}{summary[s + '_agent_busy_fraction']:>12.0%}"
              f"{summary[s + '_agent_mean_running']:>12.1f}{summary[s + '_agent_prefix_hit_rate']:>13.0%}"
              + (f"{summary[s + '_user_busy_fraction']:>11.0%}{summary[s + '_user_prefix_hit_rate']:>18.0%}"
                 if user_keys else ""))
    print(f"async / turn-sync x{summary['async_over_turn_sync']:.2f}; async / ceiling "
          f"{summary['async_over_ceiling']:.0%}")
    from benchmarks.weight_sync import cpu_flags
    summary["machine"] = {"cores": os.cpu_count(), "cpu_flags": cpu_flags()}
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    asyncio.run(main(parse_args()))
