"""Model output never crashes a call: the three parsers (JSON extraction, the agent's and the
simulator's) return a result, never raise, on random and adversarial text: huge integers, deep
nesting, thousands of braces, cut-off objects, binary noise. (Their linear time is measured in
benchmarks/parser_scaling.py, not asserted here.)"""
import random

import pytest

from sead_ray.agent.prompt import parse_agent_output
from sead_ray.core.parsing import extract_json_object
from sead_ray.user.llm_prompt import parse_user_output

ADVERSARIAL = [
    '{"reply": "hi", "estimate": {"cooperation": ' + "9" * 5000 + ', "emotion": 1, "trust": 1}}',
    '{"reply": "hi", "cooperation": ' + "9" * 5000 + ', "emotion": 1, "trust": 1, "status": "accept"}',
    '"cooperation": ' + "1" * 5000 + ', "emotion": 2, "trust": 3',
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 50_000 + "1" + "}" * 50_000,
    "{" * 30_000,
    "}" * 30_000 + "{",
    '{"reply": "' + "\\" * 10_001,
    '{"reply": "ok", "estimate": {"cooperation": NaN, "emotion": Infinity, "trust": -1e999}}',
    '{"reply": ["not", "a", "string"], "status": {"x": 1}}',
    "\x00\xff\ud800" * 1000,
    "",
]


def _random_text(rng: random.Random) -> str:
    alphabet = '{}[]":,\\ 0123456789-eE.truefalsnul reply estimate status cooperation emotion trust \n\t'
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_outputs_are_malformed_not_fatal(text, schema):
    extract_json_object(text)
    agent = parse_agent_output(text, schema)
    user = parse_user_output(text, schema, (1, 1, 1))
    # a number json refuses is never taken as a level
    assert agent.estimate is None or all(0 <= v <= 5 for v in agent.estimate.values())
    assert user.state is None or all(0 <= v <= 5 for v in user.state)


def test_random_outputs_never_raise(schema):
    rng = random.Random(0)
    for _ in range(3000):
        text = _random_text(rng)
        extract_json_object(text)
        parse_agent_output(text, schema)
        parse_user_output(text, schema, (2, 2, 2))


def test_huge_numbers_make_a_format_failure_not_an_estimate(schema):
    parsed = parse_agent_output(ADVERSARIAL[0], schema)
    assert parsed.reply == "" or not parsed.ok
    assert parse_agent_output(ADVERSARIAL[2], schema).estimate is None
