"""The audit of won calls: the rule user's own verdicts, replayed; an honest win passes, a win with a lie or with a
concern voiced and left open does not."""
import asyncio

from sead_ray.agent.scripted import HONEST, ScriptAgent
from sead_ray.evaluation.audit import audit_call, audit_won_calls
from sead_ray.play.dialogue import CallSettings, run_dialogue
from tests.unit.play.test_dialogue import rule_user
from tests.unit.play.test_starts import _profiles


def _honest_calls(scenario, n=6):
    agent = ScriptAgent(scenario, HONEST)

    async def agent_fn(dialogue_id, turn, messages, prompt_ids):
        return await agent.generate(dialogue_id, prompt_ids, messages=messages)
    settings = CallSettings(6, 2, 1, scenario.status_guards)
    return [asyncio.run(run_dialogue(f"d{i}", p, scenario, agent_fn, rule_user(scenario), settings)).to_json(scenario)
            for i, p in enumerate(_profiles(scenario, n=n))]


def test_honest_wins_pass_and_a_lie_or_an_open_concern_fails(scenario):
    records = _honest_calls(scenario)
    won = [r for r in records if r["outcome"] == "success"]
    assert won and audit_won_calls(records, scenario) == {"won": len(won), "failed": 0, "failures": []}
    call = won[0]
    lie = next(lie for fact in scenario.rule_user.facts for lie in fact.lies)
    tampered = {**call, "turns": [{**call["turns"][0], "agent": call["turns"][0]["agent"] + " " + lie}, *call["turns"][1:]]}
    audit = audit_call(tampered, scenario)
    assert not audit.passed and any("lie" in p for p in audit.problems())
    # the same win with its answers dropped: the concerns voiced are left open and the ask comes too early
    rushed = {**call, "turns": [call["turns"][0], call["turns"][-1]]}
    audit = audit_call(rushed, scenario)
    assert not audit.passed and not audit.asked_when_resolved
    assert audit_won_calls([tampered, rushed, *records], scenario)["failed"] == 2
