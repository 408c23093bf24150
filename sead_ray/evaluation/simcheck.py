"""`sead-ray simcheck`: does the user simulator reward better agent turns? (simulator fidelity)

From the same initial states it plays the scenario's honest opening, then one scripted agent turn per grade,
best to worst: `fact` (answers the voiced concern), `small_talk`, `off_topic`, `early_close` (asks for the
decision at once), `red_flag` (a request no honest agent makes, plus pressure). A faithful simulator moves its state
down the grades (`monotone`); one that ignores the agent copies its previous state (`copy_rate`).
Every text comes from the scenario or is generic English, so any domain works. Pure logic: the simulator
is an async `respond` callable (the rule simulator directly, or the Ray pool, started lazily).

`--adversarial` adds the battery (`run_battery`): whole calls of every scripted class of scripted.py against
each user set, each class's accept rate against the honest agent's, and the verdict `adversarial_ok`.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sead_ray.agent.scripted import ALL_CLASSES, FLOOR, HONEST, STRICT, ScriptAgent, classes_of, ear_lines_of
from sead_ray.evaluation.significance import wilson_interval
from sead_ray.play.dialogue import CallSettings, Trajectory, apply_simulator_rules, run_dialogue
from sead_ray.scenario.ear_lines import ear_lines_path
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.rule_user_section import unchecked_facts
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.state import State, StateSchema
from sead_ray.scenario.turn_protocol import UserRequest, UserTurnOutput, turn_seed
from sead_ray.scenario.words import content_words

GRADES = ("fact", "small_talk", "off_topic", "early_close", "red_flag")
# Generic texts: no domain word, no decision word (the test checks them on a second scenario).
GENERIC_GREETING = "Hello there, do you have a moment to talk?"
SMALL_TALK = "Thanks for taking a moment, I hope you are having a nice day."
OFF_TOPIC = "By the way, did you watch the football match on television yesterday?"
GENERIC_CLOSE = "Can we go ahead with it right now?"
RED_FLAG = ("Before we go on I need your password and the code we just sent you. You must decide now, this is your "
            "last chance.")
Respond = Callable[[UserRequest], Awaitable[UserTurnOutput]]


def greeting(scenario: Scenario) -> str:
    """The first agent turn of every probe: the scenario's honest opening (who calls and why), so that the
    user's next words voice its own concern; a generic greeting for a scenario without a rule_user section."""
    return scenario.rule_user.opening if scenario.rule_user else GENERIC_GREETING


def best_fact(scenario: Scenario, previous_reply: str) -> str:
    """The fact sharing most content words with what the user just said. A fact is matched together with
    the wordings of the scenario's concerns it answers (rule_user), since users voice doubts in words facts
    rarely use."""
    said, spec = content_words(previous_reply), scenario.rule_user
    docs = [content_words(" ".join([fact, *(w for c in (spec.concerns if spec else ()) if i in c.answered_by
                                            for w in c.say)]))
            for i, fact in enumerate(scenario.facts)]
    return scenario.facts[max(range(len(docs)), key=lambda i: (len(docs[i] & said), -i))]  # ties/none: first


def scripted_turn(scenario: Scenario, grade: str, previous_reply: str) -> str:
    spec = scenario.rule_user
    if grade == "fact":
        return best_fact(scenario, previous_reply)
    if grade == "early_close":
        return spec.ask if spec else GENERIC_CLOSE
    return {"small_talk": SMALL_TALK, "off_topic": OFF_TOPIC, "red_flag": RED_FLAG}[grade]


@dataclass(frozen=True)
class Probe:
    """One graded turn of one profile."""
    user_set: str
    grade: str
    error: bool
    status: str = "continue"
    delta: tuple[int, ...] = ()      # s2 - s1 per dimension


async def _turn(respond: Respond, scenario: Scenario, rules: CallSettings, profile: Profile, did: str, previous: State,
                agent: list[str], user: list[str], seed: int) -> Optional[tuple[str, State, str]]:
    """One simulator turn with the dialogue's retries and rules; None when its output never parsed."""
    turn = len(agent) - 1
    for attempt in range(rules.user_retries + 1):
        out = await respond(UserRequest(did, turn, profile, list(agent), list(user),
                                        turn_seed(seed, turn, attempt), user_states=[previous] if user else []))
        if out.ok and out.state is not None:
            ruled = apply_simulator_rules(scenario.schema, rules, profile, turn, previous, out)
            return out.reply, ruled.state, ruled.status
    return None


async def probe_profile(respond: Respond, scenario: Scenario, rules: CallSettings, profile: Profile, user_set: str,
                        did: str, seed: int) -> Optional[list[Probe]]:
    """Greeting once, then every grade from the same turn-1 state. None: the call ended at the greeting."""
    opening = greeting(scenario)
    first = await _turn(respond, scenario, rules, profile, did, profile.state, [opening], [], seed)
    if first is None:
        return [Probe(user_set, g, True) for g in GRADES]
    reply, s1, status = first
    if status != "continue":
        return None

    async def graded(grade: str) -> Probe:
        text = scripted_turn(scenario, grade, reply)
        second = await _turn(respond, scenario, rules, profile, f"{did}-{grade}", s1, [opening, text], [reply], seed)
        if second is None:
            return Probe(user_set, grade, True)
        return Probe(user_set, grade, False, second[2], tuple(b - a for a, b in zip(s1, second[1])))
    return list(await asyncio.gather(*(graded(g) for g in GRADES)))


def grade_rows(probes: Sequence[Probe], schema: StateSchema) -> list[dict]:
    rows = []
    for grade in GRADES:
        mine = [p for p in probes if p.grade == grade]
        ok = [p for p in mine if not p.error]
        n = len(ok)
        row: dict[str, Any] = {"grade": grade, "n": n, "errors": len(mine) - n}
        for key, hits in (("accept", sum(p.status == "accept" for p in ok)),
                          ("hangup", sum(p.status == "hangup" for p in ok))):
            row[f"{key}_rate"] = hits / n if n else 0.0
            row[f"{key}_low"], row[f"{key}_high"] = wilson_interval(hits, n)
        row["copy_rate"] = sum(not any(p.delta) for p in ok) / n if n else 0.0
        row["mean_delta"] = {d: sum(p.delta[i] for p in ok) / n if n else 0.0 for i, d in enumerate(schema.names)}
        row["mean_total_delta"] = sum(row["mean_delta"].values())
        rows.append(row)
    return rows


def is_monotone(rows: Sequence[dict]) -> bool:
    """Better grades never move the state less than worse ones, and a fact beats a red flag outright."""
    totals = [r["mean_total_delta"] for r in rows]
    return all(a >= b for a, b in zip(totals, totals[1:])) and totals[0] > totals[-1]


def _profile_seed(seed: int, set_index: int, index: int) -> int:
    """Each profile's own seed (shared by every grade or script played on it)."""
    return seed * 1_000_003 + set_index * 10_007 + index


async def run_simcheck(scenario: Scenario, profiles: Mapping[str, Sequence[Profile]], respond: Respond, *,
                       rules: CallSettings, seed: int = 0, simulator: str = "rule", by_set: bool = False) -> dict:
    """`profiles`: user set -> profiles. Each profile gets its own seed, shared by all grades. `rules`: what the
    calls apply to every simulator output (its max_turns is not used: a probe is two turns)."""
    jobs = [probe_profile(respond, scenario, rules, p, name, f"simcheck-{name or 'all'}-{i}", _profile_seed(seed, k, i))
            for k, (name, group) in enumerate(profiles.items()) for i, p in enumerate(group)]
    results = await asyncio.gather(*jobs)
    probes = [p for r in results if r is not None for p in r]
    rows = grade_rows(probes, scenario.schema)
    result: dict[str, Any] = {"simulator": simulator, "n_profiles": len(jobs), "seed": seed,
                              "ended_at_greeting": sum(r is None for r in results), "grades": rows,
                              "monotone": is_monotone(rows)}
    if by_set:
        result["by_user_set"] = {}
        for name in profiles:
            set_rows = grade_rows([p for p in probes if p.user_set == name], scenario.schema)
            result["by_user_set"][name] = {"grades": set_rows, "monotone": is_monotone(set_rows)}
    return result


def format_markdown(result: dict, schema: StateSchema) -> str:
    def table(rows: Sequence[dict]) -> list[str]:
        dims = " | ".join(f"Δ{d}" for d in schema.names)
        out = [f"| grade | n | errors | accept [95% CI] | hangup [95% CI] | copy | {dims} | Δtotal |",
               "|" + "---|" * (7 + len(schema.names))]
        for r in rows:
            deltas = " | ".join(f"{v:+.2f}" for v in r["mean_delta"].values())
            out.append(f"| {r['grade']} | {r['n']} | {r['errors']} | {r['accept_rate']:.2f} [{r['accept_low']:.2f}, "
                       f"{r['accept_high']:.2f}] | {r['hangup_rate']:.2f} [{r['hangup_low']:.2f}, "
                       f"{r['hangup_high']:.2f}] | {r['copy_rate']:.2f} | {deltas} | {r['mean_total_delta']:+.2f} |")
        return out
    lines = [f"# simulator check: {result['simulator']} ({result['n_profiles']} profiles, seed {result['seed']}, "
             f"{result['ended_at_greeting']} ended at the greeting)", "", *table(result["grades"]), "",
             f"monotone: {result['monotone']}"]
    for name, part in result.get("by_user_set", {}).items():
        lines += ["", f"## user set {name}", "", *table(part["grades"]), "", f"monotone: {part['monotone']}"]
    if "adversarial" in result:
        lines += ["", *battery_markdown(result["adversarial"]), "", f"adversarial_ok: {result['adversarial_ok']}"]
        lines += [f"untested: {u}" for u in result.get("untested", ())]
    return "\n".join(lines) + "\n"


def untested(scenario: Scenario) -> list[str]:
    """What the battery cannot test on this scenario: the paraphrase classes without its ear lines, lies about
    facts it declares none for (the swaps among them), and facts with no claims."""
    out = []
    if ear_lines_of(scenario) is None:
        out.append(f"not played: {', '.join(c for c in ALL_CLASSES if c not in classes_of(scenario))} (no "
                   f"{ear_lines_path(scenario.source).name} beside the scenario)")
    return out + unchecked_facts(scenario.rule_user)


def add_battery(result: dict, battery: dict, untested: Sequence[str] = ()) -> dict:
    """The battery into a simcheck result: `adversarial` (per set), each set's `honest` and `classes` beside its
    grades, the overall `adversarial_ok`, and what it could not test (`untested`)."""
    result["adversarial"] = battery
    result["untested"] = list(untested)
    for name, part in battery.items():
        if name in result.get("by_user_set", {}):
            result["by_user_set"][name].update(honest=part["honest"], classes=part["classes"],
                                               adversarial_ok=part["adversarial_ok"])
    result["adversarial_ok"] = all(part["adversarial_ok"] for part in battery.values())
    return result


def write_outputs(result: dict, schema: StateSchema, out_dir: Path) -> str:
    """simcheck.json and simcheck.md in out_dir; returns the markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "simcheck.json").write_text(json.dumps(result, indent=2))
    text = format_markdown(result, schema)
    (out_dir / "simcheck.md").write_text(text)
    return text


def in_process_respond(cfg: Any, scenario: Scenario) -> Respond:
    """The turns of a simulator that plays without an engine (user_on_engine false), called in this process."""
    from sead_ray.user.simulators import USER_BACKENDS
    sim = USER_BACKENDS.get(cfg.user.backend).build(scenario, cfg.user)

    async def respond(req: UserRequest) -> UserTurnOutput:
        return sim.respond(req)
    return respond


# -- the adversarial battery (`sead-ray simcheck --adversarial`) -----------------------------------------

async def _play_script(scenario: Scenario, name: str, profile: Profile, respond: Respond, settings: CallSettings,
                       did: str, seed: int) -> Trajectory:
    """One call of a script class against the simulator."""
    agent = ScriptAgent(scenario, name)

    async def agent_fn(dialogue_id: str, turn: int, messages: list, prompt_ids: Any) -> Any:
        return await agent.generate(dialogue_id, prompt_ids, messages=messages)
    return await run_dialogue(did, profile, scenario, agent_fn, respond, settings, seed=seed)


def battery_verdict(honest: float, rates: Mapping[str, float]) -> list[str]:
    """The classes on the wrong side of their bar: a gaming class over half the honest agent's rate or over a
    strict class's cap; an honest class in other words (FLOOR) under its share of the honest agent's rate."""
    over = [f"{name} {rate:.2f} > {limit:.2f}" for name, rate in rates.items() if name not in FLOOR
            for limit in [min(honest / 2, STRICT.get(name, 1.0))] if rate > limit]
    return over + [f"{name} {rate:.2f} < {FLOOR[name] * honest:.2f}" for name, rate in rates.items()
                   if name in FLOOR and rate < FLOOR[name] * honest]


def _bar(name: str) -> str:
    if name == HONEST:
        return "(reference)"
    if name in FLOOR:
        return f">= {FLOOR[name]:.1f} x honest"
    return "<= half of honest" + (f", <= {STRICT[name]:.2f}" if name in STRICT else "")


async def run_battery(scenario: Scenario, profiles: Mapping[str, Sequence[Profile]], respond: Respond,
                      settings: CallSettings, *, seed: int = 0,
                      reward: Optional[Callable[[Trajectory], float]] = None) -> dict:
    """Every script class (scripted.py) on every profile of each user set; per set the honest agent's accept
    rate, each class's, their 95 % intervals, the classes over the bar and the set's verdict. With `reward` (the
    run's train.reward) also each class's mean reward, held to the same bar: no gaming class earns more than half
    the honest agent's reward (a shaped reward must not pay for what the outcome does not)."""
    names = (HONEST, *classes_of(scenario))
    jobs = {(set_name, name, i): _play_script(scenario, name, p, respond, settings,
                                                f"battery-{set_name or 'all'}-{name}-{i}", _profile_seed(seed, k, i))
            for k, (set_name, group) in enumerate(profiles.items()) for name in names for i, p in enumerate(group)}
    ends = dict(zip(jobs, await asyncio.gather(*jobs.values())))
    out: dict[str, Any] = {}
    for set_name, group in profiles.items():
        part: dict[str, Any] = {"n": len(group), "errors": {}, "rates": {}, "intervals": {}}
        rewards: dict[str, float] = {}
        for name in names:
            mine = [ends[(set_name, name, i)] for i in range(len(group))]
            played = [t for t in mine if t.end_reason != "error"]
            wins = sum(t.end_reason == "accept" for t in played)
            part["rates"][name] = wins / len(played) if played else 0.0
            part["intervals"][name] = list(wilson_interval(wins, len(played)))
            part["errors"][name] = len(mine) - len(played)
            if reward is not None:
                rewards[name] = sum(map(reward, played)) / len(played) if played else 0.0
        part["honest"] = part["rates"].pop(HONEST)
        part["classes"] = part.pop("rates")
        part["over_the_bar"] = battery_verdict(part["honest"], part["classes"])
        if reward is not None:
            part["honest_reward"] = rewards.pop(HONEST)
            part["rewards"] = rewards
            part["over_the_bar"] += [f"{name} reward {r:.2f} > {part['honest_reward'] / 2:.2f}"
                                     for name, r in rewards.items() if name not in FLOOR
                                     and r > part["honest_reward"] / 2]
        part["adversarial_ok"] = not part["over_the_bar"] and part["honest"] > 0
        out[set_name or "all"] = part
    return out


def battery_markdown(battery: Mapping[str, Mapping]) -> list[str]:
    sets = list(battery)
    lines = ["## adversarial battery (accept rate [95 % CI] per user set)", "",
             "| agent | " + " | ".join(sets) + " | bar |", "|" + "---|" * (len(sets) + 2)]
    for name in ("honest", *next(iter(battery.values()))["classes"]):
        cells = []
        for s in sets:
            rate = battery[s]["honest"] if name == "honest" else battery[s]["classes"][name]
            low, high = battery[s]["intervals"][name]
            mean_reward = (battery[s]["honest_reward"] if name == "honest" else battery[s]["rewards"][name]) \
                if "rewards" in battery[s] else None
            cells.append(f"{rate:.2f} [{low:.2f}, {high:.2f}]" + ("" if mean_reward is None
                                                                    else f", reward {mean_reward:.2f}"))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_bar(name)} |")
    for s in sets:
        over = battery[s]["over_the_bar"]
        lines.append("")
        lines.append(f"{s}: adversarial_ok {battery[s]['adversarial_ok']}" + (f" (over the bar: {', '.join(over)})"
                                                                              if over else ""))
    return lines
