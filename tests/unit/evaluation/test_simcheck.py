"""`sead-ray simcheck`: graded scripted turns against the rule simulator and deliberately broken ones (no Ray)."""
from __future__ import annotations

import asyncio
import json

import pytest

from sead_ray.core.config_schema import CurriculumConfig
from sead_ray.curriculum.controller import ProfileController
from sead_ray.evaluation.simcheck import GRADES, best_fact, greeting, run_simcheck, scripted_turn, write_outputs
from sead_ray.play.dialogue import CallSettings
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import load_scenario
from sead_ray.scenario.turn_protocol import UserRequest, UserTurnOutput
from sead_ray.scenario.words import content_words
from sead_ray.user.rule.simulator import RuleUserSimulator
from tests.conftest import EMBEDDED_CONFIG, ROOT

CHARITY = ROOT / "configs" / "scenarios" / "charity_donation.yaml"
ROW_KEYS = {"grade", "n", "errors", "accept_rate", "accept_low", "accept_high", "hangup_rate", "hangup_low",
            "hangup_high", "copy_rate", "mean_delta", "mean_total_delta"}


def profiles(scenario, user_set: str, n: int = 16, seed: int = 3):
    return ProfileController(scenario, CurriculumConfig(user_set=user_set), seed).sample(n)


def rule(scenario, ear="lexicon"):
    sim = RuleUserSimulator(scenario, ear=ear)

    async def respond(req: UserRequest) -> UserTurnOutput:
        return sim.respond(req)
    return respond


def check(scenario, respond, sets=("soft", "hard"), n=16, **kw) -> dict:
    rules = CallSettings(4, 2, 1, scenario.status_guards)
    return asyncio.run(run_simcheck(scenario, {s: profiles(scenario, s, n) for s in sets}, respond, rules=rules, **kw))


def row(rows, grade):
    return next(r for r in rows if r["grade"] == grade)


def test_json_and_markdown_follow_the_contract(scenario, tmp_path):
    result = check(scenario, rule(scenario), by_set=True)
    md = write_outputs(result, scenario.schema, tmp_path)
    data = json.loads((tmp_path / "simcheck.json").read_text())
    assert {"simulator", "n_profiles", "grades", "monotone", "by_user_set"} <= set(data)
    assert data["simulator"] == "rule" and data["n_profiles"] == 32
    assert [r["grade"] for r in data["grades"]] == list(GRADES)
    for r in data["grades"] + [r for part in data["by_user_set"].values() for r in part["grades"]]:
        assert set(r) == ROW_KEYS
        assert set(r["mean_delta"]) == set(scenario.schema.names)
        assert 0.0 <= r["accept_low"] <= r["accept_rate"] <= r["accept_high"] <= 1.0
        assert r["mean_total_delta"] == pytest.approx(sum(r["mean_delta"].values()))
    assert set(data["by_user_set"]) == {"soft", "hard"}
    assert all(isinstance(part["monotone"], bool) for part in data["by_user_set"].values())
    assert row(data["grades"], "fact")["n"] == 32
    assert (tmp_path / "simcheck.md").read_text() == md and "red_flag" in md and "monotone: True" in md


def test_without_sets_there_is_no_per_set_report(scenario):
    assert "by_user_set" not in check(scenario, rule(scenario), sets=("soft",))


@pytest.mark.parametrize("user_set", ["soft", "hard"])
def test_the_rule_simulator_ranks_the_grades(scenario, user_set):
    result = check(scenario, rule(scenario), sets=(user_set,), n=20, by_set=True)
    rows = result["grades"]
    assert result["monotone"] and result["by_user_set"][user_set]["monotone"]
    totals = {r["grade"]: r["mean_total_delta"] for r in rows}
    accepts = {r["grade"]: r["accept_rate"] for r in rows}
    assert totals["fact"] == max(totals.values()) > totals["red_flag"] == min(totals.values())
    assert accepts["fact"] == max(accepts.values()) and accepts["red_flag"] == min(accepts.values())
    # a turn that leaves the voiced concern unanswered costs (v2): it never leaves the state where it was
    assert totals["off_topic"] < 0 and row(rows, "fact")["copy_rate"] < 0.5
    assert all(r["errors"] == 0 and r["n"] == 20 for r in rows)


def test_the_fact_answers_each_concern_the_rule_user_voices(scenario):
    """Whatever wording the user picks, the `fact` grade answers the concern it voiced (trust and cooperation up)."""
    sim = RuleUserSimulator(scenario)
    spec = scenario.rule_user
    for concern in spec.concerns:
        for wording in concern.say:
            fact = best_fact(scenario, f"{spec.lines['objection'][0]} {wording}")
            assert scenario.facts.index(fact) in concern.answered_by, wording
            behavior = next(b.text for b in scenario.behaviors if b.category in concern.categories or
                            b.text in concern.behaviors)
            profile = Profile((1, 2, 1), (behavior,))
            first = sim.respond(UserRequest("d", 0, profile, [spec.opening], [], seed=0))
            after = sim.respond(UserRequest("d", 1, profile, [spec.opening, fact], [first.reply], seed=1))
            assert after.state[0] > first.state[0] and after.state[2] > first.state[2], (concern.name, fact)
    assert best_fact(scenario, "") == scenario.facts[0]   # nothing to match: the first fact


def test_scripted_texts_come_from_the_scenario_only(scenario):
    charity = load_scenario(CHARITY)
    spec = scenario.rule_user
    restaurant = content_words(" ".join([scenario.description, scenario.agent_role, scenario.objective, *scenario.sop,
                                         *scenario.facts, scenario.agent_title, scenario.user_title, scenario.channel,
                                         *(w for c in spec.concerns for w in c.say), spec.opening, spec.ask,
                                         *spec.decision_words]))
    charity_words = content_words(CHARITY.read_text())
    texts = [greeting(charity)] + [scripted_turn(charity, g, w) for c in charity.rule_user.concerns for w in c.say
                                   for g in GRADES]
    leaked = (content_words(" ".join(texts)) & restaurant) - charity_words
    assert not leaked, leaked
    assert "restaurant" in restaurant and "activate" in restaurant   # the check sees the domain words
    assert scripted_turn(charity, "early_close", "") == charity.rule_user.ask
    commitment = next(c for c in charity.rule_user.concerns if c.name == "commitment")
    assert scripted_turn(charity, "fact", commitment.say[0]) == charity.facts[1]


def test_a_simulator_that_ignores_the_agent_is_caught(scenario):
    async def copier(req: UserRequest) -> UserTurnOutput:
        return UserTurnOutput("Okay.", req.current_state, "continue", ok=True)
    result = check(scenario, copier, by_set=True)
    assert result["monotone"] is False
    assert all(part["monotone"] is False for part in result["by_user_set"].values())
    assert all(r["copy_rate"] == 1.0 and r["mean_total_delta"] == 0.0 for r in result["grades"])


def test_parse_failures_are_errors_not_outcomes(scenario):
    base, calls = rule(scenario), []

    async def flaky(req: UserRequest) -> UserTurnOutput:
        calls.append(req)
        said = req.agent_replies[-1]
        if said == scripted_turn(scenario, "red_flag", ""):
            return UserTurnOutput("", None, "continue", ok=False, error="no JSON")
        if said == scripted_turn(scenario, "off_topic", "") and req.seed % 2 == 0:
            return UserTurnOutput("{", None, "continue", ok=False)   # fails some attempts only: retried
        return await base(req)
    result = check(scenario, flaky, sets=("hard",), n=10)
    flag, off = row(result["grades"], "red_flag"), row(result["grades"], "off_topic")
    assert flag["errors"] == 10 and flag["n"] == 0 and flag["accept_rate"] == 0.0
    assert off["errors"] == 0 and off["n"] == 10
    assert len([c for c in calls if c.agent_replies[-1] == scripted_turn(scenario, "off_topic", "")]) > 10
    assert len([c for c in calls if c.agent_replies[-1] == flag_text(scenario)]) == 10 * 3   # 1 try + 2 retries
    assert result["monotone"] is False   # red_flag without data cannot be ranked below fact

    async def mute(req: UserRequest) -> UserTurnOutput:
        return UserTurnOutput("", None, "continue", ok=False)
    assert all(r["errors"] == 10 and r["n"] == 0 for r in check(scenario, mute, sets=("hard",), n=10)["grades"])


def flag_text(scenario) -> str:
    return scripted_turn(scenario, "red_flag", "")


def test_every_grade_sees_the_same_greeting_turn(scenario):
    seen: dict[str, list] = {}
    base = rule(scenario)

    async def spy(req: UserRequest) -> UserTurnOutput:
        seen.setdefault(req.dialogue_id.split("-")[2], []).append((req.turn_index, req.seed, req.current_state))
        return await base(req)
    check(scenario, spy, sets=("soft",), n=6)
    assert len(seen) == 6
    for turns in seen.values():
        assert [t for t, _, _ in turns].count(0) == 1                    # the greeting is played once
        second = [(s, st) for t, s, st in turns if t == 1]
        assert len(second) == len(GRADES) and len(set(second)) == 1     # same seed and state for every grade


def test_cli_writes_both_files_with_the_rule_backend(tmp_path, capsys):
    from sead_ray.cli.main import main
    assert main(["simcheck", "--config", str(EMBEDDED_CONFIG), "--n", "6", "--user-sets", "soft,hard",
                 "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "simcheck.json").read_text())
    assert data["n_profiles"] == 12 and set(data["by_user_set"]) == {"soft", "hard"}
    assert "| fact |" in capsys.readouterr().out and (tmp_path / "simcheck.md").exists()
    assert main(["simcheck", "--config", str(EMBEDDED_CONFIG), "--n", "2", "--user-sets", "nope",
                 "--out", str(tmp_path / "x")]) == 2


def test_the_battery_passes_on_both_shipped_scenarios_and_catches_a_gameable_user(scenario):
    """Every scripted class of issue 23 against the rule user v2 (both scenarios, both user sets, both ears) stays
    under the bar; the paraphrase classes are played too (ear lines beside the scenario), and an honest agent in
    its own words wins against the semantic ear on soft owners where the lexicon hears it far less; a user that
    accepts whoever mentions a fact's words (the v1 weakness) is caught."""
    from sead_ray.agent.scripted import ALL_CLASSES, CLASSES
    from sead_ray.evaluation.simcheck import run_battery
    for scen in (scenario, load_scenario(CHARITY)):
        sets = {s: profiles(scen, s, 30, seed=5) for s in ("soft", "hard")}
        paraphrase = {}
        for ear in ("lexicon", "semantic"):
            result = asyncio.run(run_battery(scen, sets, rule(scen, ear), CallSettings(6, 2, 1, scen.status_guards)))
            for name, part in result.items():
                assert not [o for o in part["over_the_bar"] if o.split()[0] in CLASSES], (scen.name, ear, name, part)
                assert part["honest"] >= 0.5 and set(part["classes"]) == set(ALL_CLASSES)
            paraphrase[ear] = result["soft"]["classes"]["honest_paraphrase"] / result["soft"]["honest"]
        assert paraphrase["semantic"] >= 0.6 and paraphrase["semantic"] >= paraphrase["lexicon"] + 0.4, paraphrase

    facts = {w for f in scenario.facts for w in content_words(f)}

    async def keyword_user(req: UserRequest) -> UserTurnOutput:
        said = content_words(req.agent_replies[-1])
        status = "accept" if len(said & facts) >= 3 and req.turn_index >= 1 else "continue"
        return UserTurnOutput("Go on.", req.current_state, status, ok=True)
    sets = {"soft": profiles(scenario, "soft", 20)}
    gamed = asyncio.run(run_battery(scenario, sets, keyword_user, CallSettings(4, max_step=1)))["soft"]
    assert not gamed["adversarial_ok"] and any(c.startswith("open_loop_facts") for c in gamed["over_the_bar"])


def test_cli_adversarial_writes_the_battery_per_user_set(tmp_path, capsys):
    from sead_ray.cli.main import main
    out = tmp_path / "adv"
    assert main(["simcheck", "--config", str(EMBEDDED_CONFIG), "--adversarial", "--n", "8", "--user-sets", "soft,hard",
                 "--set", "user.rule.ear=lexicon", "--out", str(out)]) == 0
    data = json.loads((out / "simcheck.json").read_text())
    # the lexicon ear (the default) is deaf to honest answers in other words: only the honest classes miss their bar
    assert data["adversarial_ok"] is False
    for name in ("soft", "hard"):
        part = data["by_user_set"][name]
        assert 0 < part["honest"] <= 1 and part["classes"]["lies"] == 0.0 and len(part["classes"]) == 18
        over = data["adversarial"][name]["over_the_bar"]
        assert over and all(o.startswith("honest_") for o in over), over
    assert "## adversarial battery" in (out / "simcheck.md").read_text() and "open_loop_facts" in capsys.readouterr().out


def test_script_agents_answer_in_the_agents_format_from_what_they_heard(scenario):
    from sead_ray.agent.prompt import agent_messages, parse_agent_output
    from sead_ray.agent.scripted import ScriptAgent, script_class
    from sead_ray.core.models import ModelError
    agent = ScriptAgent(scenario, script_class("script:honest"))
    first = asyncio.run(agent.generate("d", None, messages=agent_messages(scenario, [], [])))
    parsed = parse_agent_output(first.text, scenario.schema)
    assert parsed.ok and parsed.reply == scenario.rule_user.opening
    cost = next(c for c in scenario.rule_user.concerns if c.name == "cost")
    second = asyncio.run(agent.generate("d", None, messages=agent_messages(scenario, [cost.say[2]], [first.text])))
    assert parse_agent_output(second.text, scenario.schema).reply == scenario.facts[cost.answered_by[0]]
    assert script_class("tiny:llama-h64") is None
    with pytest.raises(ModelError, match="unknown script class 'nope'"):
        script_class("script:nope")


def test_the_battery_holds_the_shaped_reward_to_the_same_bar(scenario):
    """train.reward = milestones pays for the rule user's agenda: no gaming class earns half the honest reward."""
    from sead_ray.agent.scripted import CLASSES
    from sead_ray.evaluation.simcheck import battery_markdown, run_battery
    from sead_ray.training.rewards import REWARDS
    from tests.conftest import tiny_config
    train = tiny_config("user.backend=rule", "train.reward=milestones", "train.milestone_weight=0.49").train
    sets = {s: profiles(scenario, s, 12, seed=5) for s in ("soft", "hard")}
    settings = CallSettings(6, 2, 1, scenario.status_guards)
    result = asyncio.run(run_battery(scenario, sets, rule(scenario, "lexicon"), settings,
                                     reward=lambda call: REWARDS.get("milestones")(call, train)))
    for part in result.values():
        assert part["honest_reward"] > part["honest"]      # the honest calls' agenda bonus on top of their wins
        assert set(part["rewards"]) == set(part["classes"])
        assert all(part["rewards"][c] <= part["honest_reward"] / 2 for c in CLASSES), part["rewards"]
        assert not [o for o in part["over_the_bar"] if "reward" in o and o.split()[0] in CLASSES]
    assert ", reward " in "\n".join(battery_markdown(result))
