"""Starts deeper into a call (issue 36): the honest script plays the first turns, the policy takes over `depth`
turns before the final ask; the script's turns are in the agent's context token-exact and out of the loss, a start
never ends the call before the policy speaks, and the metrics count only the policy's turns."""
import asyncio

import pytest

from sead_ray.agent.prompt import agent_messages
from sead_ray.agent.token_context import IncrementalChatEncoder
from sead_ray.core.config_schema import CurriculumConfig
from sead_ray.curriculum.controller import ProfileController
from sead_ray.evaluation.metrics import compute_metrics
from sead_ray.play.dialogue import CallSettings, run_dialogue
from sead_ray.play.starts import honest_start
from tests.unit.play.test_dialogue import rule_user, scripted_agent


def _profiles(scenario, user_set="soft", n=8):
    return ProfileController(scenario, CurriculumConfig(user_set=user_set), 2).sample(n)


def test_a_start_at_depth_0_leaves_the_policy_only_the_ask_token_exact_and_out_of_the_loss(scenario, smollm_tokenizer):
    tok, spec = smollm_tokenizer, scenario.rule_user
    settings = CallSettings(6, 2, 1, scenario.status_guards)
    profile = _profiles(scenario)[0]
    start = asyncio.run(honest_start(scenario, profile, rule_user(scenario), settings, depth=0))
    assert start is not None and len(start.turns) >= 2 and start.depth == 0
    encoder = IncrementalChatEncoder(tok, agent_messages(scenario, [], []))
    traj = asyncio.run(run_dialogue("d", profile, scenario, scripted_agent([spec.ask], tokenizer=tok),
                                    rule_user(scenario), settings, encoder=encoder, scripted=start.turns))
    assert traj.end_reason == "accept"
    assert [t.scripted for t in traj.turns] == [True] * len(start.turns) + [False]
    assert all(t.user_status == "continue" for t in traj.turns if t.scripted)   # the prefix never ends the call
    # the whole context renders as the chat template would; the loss covers the policy's one turn only
    messages = agent_messages(scenario, [t.user for t in traj.turns[:-1]], [t.agent_raw for t in traj.turns[:-1]])
    messages.append({"role": "assistant", "content": traj.turns[-1].agent_raw})
    assert tok.decode(traj.token_ids) == tok.apply_chat_template(messages, tokenize=False)
    masked = [i for i, m in zip(traj.token_ids, traj.loss_mask) if m]
    assert masked == tok(traj.turns[-1].agent_raw, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    record = traj.to_json(scenario)
    assert record["scripted_turns"] == len(start.turns) and record["policy_versions"] == [3]
    metrics = compute_metrics([record], scenario.schema)
    assert metrics.att == 1 and metrics.estimates == 1
    taken_over = traj.turns[len(start.turns) - 1].user_state
    assert metrics.ti == traj.turns[-1].user_state["trust"] - taken_over["trust"]


def test_the_policy_must_still_ask_and_deeper_starts_leave_it_more(scenario):
    settings = CallSettings(6, 2, 1, scenario.status_guards)
    profile = _profiles(scenario)[0]
    shallow = asyncio.run(honest_start(scenario, profile, rule_user(scenario), settings, depth=0))
    deeper = asyncio.run(honest_start(scenario, profile, rule_user(scenario), settings, depth=1))
    assert deeper is not None and deeper.turns == shallow.turns[:-1]
    silent = asyncio.run(run_dialogue("d", profile, scenario, scripted_agent(["Have a nice day."]),
                                      rule_user(scenario), settings, scripted=shallow.turns))
    assert silent.end_reason != "accept"


def test_no_start_deeper_than_the_script_s_call_or_where_the_script_failed(scenario):
    settings = CallSettings(6, 2, 1, scenario.status_guards)
    profile = _profiles(scenario)[0]
    start = asyncio.run(honest_start(scenario, profile, rule_user(scenario), settings, depth=0))
    assert asyncio.run(honest_start(scenario, profile, rule_user(scenario), settings, depth=len(start.turns) + 1)) is None
    cold = asyncio.run(honest_start(scenario, profile, rule_user(scenario), settings, depth=len(start.turns)))
    assert cold is not None and cold.turns == ()
    # two turns are too few for the honest script to reach its ask: no start at all
    assert asyncio.run(honest_start(scenario, profile, rule_user(scenario), CallSettings(2, 2, 1), depth=0)) is None
    with pytest.raises(ValueError, match="depth"):
        asyncio.run(honest_start(scenario, profile, rule_user(scenario), settings, depth=-1))
