import json

import pytest

from sead_ray.prompts import (
    agent_messages,
    agent_system_prompt,
    extract_json_object,
    parse_agent_output,
    parse_user_output,
    user_messages,
    user_output_schema,
)


def test_extract_json_object_is_tolerant():
    assert extract_json_object('```json\n{"a": 1}\n```') == {"a": 1}
    assert extract_json_object('Sure! {"a": {"b": 2}} hope that helps') == {"a": {"b": 2}}
    assert extract_json_object('{"reply": "a } brace", "x": 1}') == {"reply": "a } brace", "x": 1}
    assert extract_json_object('{"reply": "cut", "estimate": {"trust": 2') == {"reply": "cut", "estimate": {"trust": 2}}
    assert extract_json_object("no json here") is None
    assert extract_json_object("") is None
    assert extract_json_object(None) is None
    assert extract_json_object("{{{{") is None


@pytest.mark.parametrize("text, reply, estimate, ok", [
    ('{"reply": "Hello, this is Lin.", "estimate": {"cooperation": 2, "emotion": 2, "trust": 3}}',
     "Hello, this is Lin.", {"cooperation": 2, "emotion": 2, "trust": 3}, True),
    ('{"reply": "Hi", "estimate": {"cooperation": 9, "emotion": -1, "trust": "3"}}',   # clamped, string digits
     "Hi", {"cooperation": 4, "emotion": 0, "trust": 3}, True),
    ('{"reply": "Hi", "cooperation": 1, "emotion": 1, "trust": 1}', "Hi",
     {"cooperation": 1, "emotion": 1, "trust": 1}, True),
    ('{"reply": "Hi there"}', "Hi there", None, False),
    ('{"reply": "Hi there", "estimate": {"cooperation": "high"}}', "Hi there", None, False),
    ('{"reply": "We offer a free cred', "We offer a free cred", None, False),
    ('{"reply": "said \\"free\\"", "estimate": {"coop', 'said "free"', None, False),
    ('{"reply": "Hi", "estimate": {"trust": 3, "cooperation": 2, "emotion": 1, "x"}}', "Hi",   # broken JSON
     {"cooperation": 2, "emotion": 1, "trust": 3}, False),
    ("Hello! I am calling about your free credit.", "Hello! I am calling about your free credit.", None, False),
    ("", "", None, False),
    ("{}", "", None, False),
])
def test_parse_agent_output(schema, text, reply, estimate, ok):
    parsed = parse_agent_output(text, schema)
    assert (parsed.reply, parsed.estimate, parsed.ok) == (reply, estimate, ok)
    assert ok or parsed.error


@pytest.mark.parametrize("text, state, status, ok", [
    ('{"reply": "Who is this?", "cooperation": 2, "emotion": 1, "trust": 1, "status": "continue"}', (2, 1, 1),
     "continue", True),
    ('{"reply": "Fine, do it.", "cooperation": 4, "emotion": 3, "trust": 4, "status": "accept"}', (4, 3, 4), "accept", True),
    ('{"reply": "Bye", "cooperation": 0, "emotion": 0, "trust": 0, "status": "hang-up"}', (0, 0, 0), "hangup", True),
    ('{"reply": "Hm", "cooperation": 7, "emotion": 1, "trust": 1, "status": "continue"}', (4, 1, 1), "continue", True),
    ('{"reply": "Hm", "emotion": 1, "status": "continue"}', (2, 1, 2), "continue", False),  # missing dims keep previous
    ('{"reply": "Hm", "cooperation": 1, "emotion": 1, "trust": 1, "status": "maybe"}', (1, 1, 1), "continue", False),
    ('{"reply": "", "cooperation": 1, "emotion": 1, "trust": 1, "status": "accept"}', None, "continue", False),
    ("I would rather not say", None, "continue", False),
])
def test_parse_user_output(schema, text, state, status, ok):
    parsed = parse_user_output(text, schema, previous_state=(2, 2, 2))
    assert (parsed.state, parsed.status, parsed.ok) == (state, status, ok)


def test_user_schema_matches_the_state_grid(schema):
    js = user_output_schema(schema)
    assert js["properties"]["trust"] == {"type": "integer", "minimum": 0, "maximum": 5}
    assert js["properties"]["status"]["enum"] == ["continue", "accept", "refuse", "hangup"]
    assert set(js["required"]) == {"reply", "cooperation", "emotion", "trust", "status"}


def test_agent_never_sees_simulator_state(scenario):
    msgs = agent_messages(scenario, ["Who is this?"], ['{"reply": "Lin here", "estimate": {}}'])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[-1]["content"] == "Who is this?"
    privileged = agent_messages(scenario, ["Who is this?"], ["x"], privileged_states=[(1, 2, 3)])
    assert "true owner state" in privileged[-1]["content"]
    system = agent_system_prompt(scenario)
    assert "700 yuan" in system and "estimate" in system
    for b in scenario.behaviors[:5]:
        assert b.text not in system


def test_user_prompt_holds_profile_and_transcript(scenario):
    msgs = user_messages(scenario, ["Asks if a deposit is required"], (1, 2, 3), (1, 2, 3),
                         ["Hello, Lin here.", "It is free."], ["Who?"])
    text = msgs[0]["content"] + msgs[1]["content"]
    assert "Asks if a deposit is required" in text
    assert "Caller: Hello, Lin here.\nYou: Who?\nCaller: It is free." in msgs[1]["content"]
    assert json.dumps({"cooperation": 1, "emotion": 2, "trust": 3}) in msgs[1]["content"]
    with pytest.raises(ValueError):
        user_messages(scenario, [], (1, 2, 3), (1, 2, 3), ["a"], ["b"])
