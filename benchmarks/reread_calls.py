"""Do a run's recorded calls read differently to the rule user as it is now? Replays every call of a run's
dialogues files through the current `rule` simulator (the run's own config and scenario) and compares, turn by
turn, the user's state and decision with what was recorded. A change of the user that changes no reading needs
no rerun of the figures built on those calls.

    python benchmarks/reread_calls.py runs/demo
    python benchmarks/reread_calls.py runs/demo --show 5 --json reread.json

Prints per dialogues file the calls replayed, those whose readings changed (any turn's state or decision), those
whose reasons changed (what the ear recorded that it heard, `turns[].user_heard`, read the same way or not: a
reshaping of the user must change none), and the first few changed turns with what the user hears now (and the
first few turns heard for other reasons, with both readings).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a run directory (config.yaml, dialogues/)")
    p.add_argument("--show", type=int, default=3, help="changed turns to print per file")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    from sead_ray.core.config import load_config
    from sead_ray.scenario.profiles import Profile
    from sead_ray.scenario.scenario import load_scenario
    from sead_ray.scenario.turn_protocol import UserRequest
    from sead_ray.user.rule.simulator import RuleUserSimulator

    run = Path(args.run)
    cfg = load_config(run / "config.yaml")
    if cfg.user.backend != "rule":
        print(f"{run}: user.backend is {cfg.user.backend!r}; only the rule user replays", file=sys.stderr)
        return 2
    scenario = load_scenario(cfg.scenario)
    sim = RuleUserSimulator(scenario, ear=cfg.user.rule.ear)
    names = scenario.schema.names
    out = {}
    for path in sorted((run / "dialogues").glob("*.jsonl")):
        calls = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        changed, reasons_changed, shown, reasons_shown = 0, 0, [], []
        for call in calls:
            if call.get("error"):
                continue
            pr = call["profile"]
            profile = Profile(tuple(pr[n] for n in names), tuple(pr["behaviors"]), start_depth=pr.get("start_depth"))
            agent, user, differs, reasons_differ = [], [], False, False
            for i, turn in enumerate(call["turns"]):
                agent.append(turn["agent"])
                now = sim.respond(UserRequest(call["dialogue_id"], i, profile, list(agent), list(user), seed=0))
                before = (tuple(turn["user_state"][n] for n in names), turn["user_status"])
                heard_now = json.loads(json.dumps(now.heard))
                if "user_heard" in turn and heard_now != turn["user_heard"] and not reasons_differ:
                    reasons_differ = True
                    if len(reasons_shown) < args.show:
                        reasons_shown.append({"call": call["dialogue_id"], "turn": i, "agent": turn["agent"],
                                              "recorded": turn["user_heard"], "now": heard_now})
                if (now.state, now.status) != before:
                    differs = True
                    if len(shown) < args.show:
                        shown.append({"call": call["dialogue_id"], "turn": i, "agent": turn["agent"],
                                      "recorded": before, "now": (now.state, now.status), "heard": now.heard[0]})
                    break
                user.append(turn["user"])
            changed += differs
            reasons_changed += reasons_differ
        out[path.name] = {"calls": len(calls), "readings_changed": changed, "reasons_changed": reasons_changed,
                          "first_changed_turns": shown, "first_turns_with_other_reasons": reasons_shown}
        print(f"{path.name}: {len(calls)} calls, {changed} read differently now, {reasons_changed} with other reasons"
              + (f" (first change: {shown[0]['call']} turn {shown[0]['turn']})" if shown else ""))
        for s in shown:
            print(f"  {s['call']} turn {s['turn']}: {s['agent']!r}\n    recorded {s['recorded']}, now {s['now']}: "
                  f"{s['heard']['verdict']}")
        for s in reasons_shown:   # the same state and decision, heard for other reasons
            print(f"  {s['call']} turn {s['turn']}: {s['agent']!r}\n    recorded {s['recorded']}\n    now      {s['now']}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
