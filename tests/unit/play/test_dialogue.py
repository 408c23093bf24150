import asyncio
import json

import pytest

from sead_ray.agent.token_context import IncrementalChatEncoder
from sead_ray.evaluation.metrics import compute_metrics
from sead_ray.play.dialogue import CallSettings, run_dialogue
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.turn_protocol import AgentTurnOutput, UserTurnOutput
from sead_ray.user.rule.simulator import RuleUserSimulator

GOOD = [   # an honest call for the default profile (an owner asking about a deposit), as the rule user v2 hears it
    "Hello, this is Lin, an account manager at your local-services platform. Your restaurant qualifies for a free "
    "700-yuan advertising trial credit.",
    "Thank you for asking! It is completely free: no deposit and no bank card.",
    "May I activate the free credit for you now?",
]


def scripted_agent(replies, calls=None, tokenizer=None):
    """A stand-in for the agent engine in pure tests: plays fixed replies (as JSON outputs)."""
    async def agent(dialogue_id, turn, messages, prompt_ids):
        if calls is not None:
            calls.append(messages)
        text = json.dumps({"reply": replies[min(turn, len(replies) - 1)],
                           "estimate": {"cooperation": 2, "emotion": 2, "trust": 2}})
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] if tokenizer else []
        return AgentTurnOutput(text, ids, [-0.5] * len(ids), policy_version=3)
    return agent


def rule_user(scenario, **kw):
    sim = RuleUserSimulator(scenario, **kw)

    async def user(req):
        return sim.respond(req)
    return user


def play(scenario, agent, user, profile=Profile((2, 2, 3), ("Asks if a deposit is required",)), encoder=None,
         max_turns=15, **settings):
    return asyncio.run(run_dialogue("d0", profile, scenario, agent, user, CallSettings(max_turns, **settings),
                                    encoder=encoder))


def test_convincing_agent_gets_accept(scenario):
    traj = play(scenario, scripted_agent(GOOD), rule_user(scenario))
    assert traj.end_reason == "accept" and traj.outcome == "success"
    assert traj.turns[-1].user_status == "accept"
    assert all(t.agent_parse_ok and t.policy_version == 3 for t in traj.turns)
    record = traj.to_json(scenario)
    assert record["profile"] == {"cooperation": 2, "emotion": 2, "trust": 3, "behaviors": ["Asks if a deposit is required"]}
    assert compute_metrics([record], scenario.schema).cr == 1.0


def test_silent_agent_fails(scenario):
    traj = play(scenario, scripted_agent(["ok"]), rule_user(scenario))
    assert traj.outcome == "failure" and traj.end_reason in ("refuse", "hangup", "timeout")


def test_timeout_after_t_max(scenario):
    async def stubborn(req):
        return UserTurnOutput("Go on.", req.current_state, "continue", ok=True)
    traj = play(scenario, scripted_agent(GOOD), stubborn, max_turns=4)
    assert (traj.end_reason, traj.outcome, len(traj.turns)) == ("timeout", "failure", 4)


def test_agent_never_sees_simulator_state(scenario):
    calls = []
    play(scenario, scripted_agent(GOOD, calls), rule_user(scenario))
    for messages in calls:
        for m in messages[1:]:
            assert "true owner state" not in m["content"]
            assert '"cooperation"' not in m["content"] or m["role"] == "assistant"
    calls.clear()
    play(scenario, scripted_agent(GOOD, calls), rule_user(scenario), privileged_user_view=True)
    assert any("true owner state" in m["content"] for m in calls[-1])


def test_unparseable_user_is_retried_then_errors(scenario):
    attempts = []

    async def flaky(req):
        attempts.append(req.seed)
        if len(attempts) == 1:
            return UserTurnOutput("", None, "continue", ok=False, error="cut off")
        return UserTurnOutput("Who?", req.current_state, "continue", ok=True)
    traj = play(scenario, scripted_agent(GOOD), flaky, max_turns=1)
    assert traj.user_parse_failures == 1 and traj.end_reason == "timeout"
    assert len(set(attempts)) == len(attempts)   # a retry samples anew

    async def broken(req):
        return UserTurnOutput("", None, "continue", ok=False, error="no JSON")
    traj = play(scenario, scripted_agent(GOOD), broken, user_retries=2)
    assert traj.end_reason == "error" and traj.user_parse_failures == 3 and "no JSON" in traj.error
    assert len(traj.turns) == 1 and not traj.turns[0].user_parse_ok


def test_dead_backend_ends_the_dialogue_keeping_turns(scenario):
    async def dying_user(req):
        if req.turn_index == 1:
            raise ConnectionError("engine died")
        return UserTurnOutput("Hm?", req.current_state, "continue", ok=True)
    traj = play(scenario, scripted_agent(GOOD), dying_user)
    assert traj.end_reason == "error" and len(traj.turns) == 2 and "engine died" in traj.error


def test_rule_dialogues_are_deterministic(scenario):
    a = play(scenario, scripted_agent(GOOD[1:]), rule_user(scenario)).to_json(scenario)
    b = play(scenario, scripted_agent(GOOD[1:]), rule_user(scenario)).to_json(scenario)
    a.pop("timing"), b.pop("timing")
    assert a == b


def test_planted_phrase_decides(scenario):
    traj = play(scenario, scripted_agent(["Hello, this is the platform.", "We have an offer.", "It is for your restaurant.",
                                       "It is free of charge."]),
                rule_user(scenario, accept_phrase="free of charge", patience=10))
    assert traj.end_reason == "accept" and len(traj.turns) == 4


def test_token_ledger_matches_the_chat_template(scenario, smollm_tokenizer):
    tok = smollm_tokenizer
    profile = Profile((2, 2, 3), ())
    from sead_ray.agent.prompt import agent_messages
    prefix = agent_messages(scenario, [], [])
    encoder = IncrementalChatEncoder(tok, prefix)
    traj = play(scenario, scripted_agent(GOOD, tokenizer=tok), rule_user(scenario), profile=profile, encoder=encoder)
    assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.rollout_logprobs)
    # The ledger decodes to exactly what the template renders for the whole conversation.
    messages = agent_messages(scenario, [t.user for t in traj.turns[:-1]], [t.agent_raw for t in traj.turns[:-1]])
    messages.append({"role": "assistant", "content": traj.turns[-1].agent_raw})
    rendered = tok.apply_chat_template(messages, tokenize=False)
    assert tok.decode(traj.token_ids) == rendered
    # Loss mask covers the agent's generated tokens (its text + EOS) and nothing else.
    masked = [i for i, m in zip(traj.token_ids, traj.loss_mask) if m]
    expected = sum((tok(t.agent_raw, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in traj.turns), [])
    assert masked == expected
    assert all(lp == -0.5 for lp, m in zip(traj.rollout_logprobs, traj.loss_mask) if m)
    assert all(lp == 0.0 for lp, m in zip(traj.rollout_logprobs, traj.loss_mask) if not m)


def test_prefill_is_context_not_generation(scenario, smollm_tokenizer):
    tok = smollm_tokenizer
    from sead_ray.agent.prompt import agent_messages
    prefill = '{"reply": "'

    async def agent(dialogue_id, turn, messages, prompt_ids):
        assert tok.decode(prompt_ids).endswith("<|im_start|>assistant\n" + prefill)
        text = 'Hello, it is free.", "estimate": {"cooperation": 2, "emotion": 2, "trust": 2}}'
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return AgentTurnOutput(text, ids, [-0.1] * len(ids))
    enc = IncrementalChatEncoder(tok, agent_messages(scenario, [], []), prefill)
    traj = play(scenario, agent, rule_user(scenario), encoder=enc, agent_prefill=prefill, max_turns=2)
    assert traj.turns[0].agent == "Hello, it is free." and traj.turns[0].agent_parse_ok
    assert traj.turns[0].agent_raw.startswith(prefill)
    messages = agent_messages(scenario, [traj.turns[0].user], [traj.turns[0].agent_raw])
    messages.append({"role": "assistant", "content": traj.turns[1].agent_raw})
    assert tok.decode(traj.token_ids) == tok.apply_chat_template(messages, tokenize=False)
    masked = tok.decode([i for i, m in zip(traj.token_ids, traj.loss_mask) if m])
    assert prefill not in masked and masked.count("Hello, it is free.") == 2


def test_cut_off_generation_is_closed_by_the_template(scenario, smollm_tokenizer):
    tok = smollm_tokenizer
    from sead_ray.agent.prompt import agent_messages
    enc = IncrementalChatEncoder(tok, agent_messages(scenario, [], []))
    start = len(enc.token_ids)
    ids = tok("Hello there", add_special_tokens=False)["input_ids"]   # no EOS: hit max_tokens
    enc.add_generation(ids, [-1.0] * len(ids))
    enc.add_user("Who is it?")
    assert tok.decode(enc.token_ids[start:]) == \
        "Hello there<|im_end|>\n<|im_start|>user\nWho is it?<|im_end|>\n<|im_start|>assistant\n"
    assert sum(enc.loss_mask) == len(ids)
    with pytest.raises(ValueError):
        enc.add_generation([1, 2], [0.0])


def test_turn_barrier_holds_everyone_until_the_last_arrives():
    from benchmarks.turn_sync import TurnBarrier
    order = []

    async def party(barrier, name, turns, delay):
        for t in range(turns):
            await asyncio.sleep(delay)
            await barrier.wait()
            order.append((t, name))
        barrier.leave()

    async def main():
        barrier = TurnBarrier(3)
        await asyncio.gather(party(barrier, "fast", 3, 0.0), party(barrier, "slow", 3, 0.02),
                             party(barrier, "short", 1, 0.0))
    asyncio.run(main())
    # turn 0: all three pass together; later turns: the two remaining pass together, in lock-step
    assert [t for t, _ in order] == [0, 0, 0, 1, 1, 2, 2]
