"""The `rule` user v2 cannot be gamed: it asks who calls and why, grades each turn only against what it voiced,
tells an answer from a parrot and a lie, hears pressure and credential requests in new words, accepts only a
persuaded user who was asked, and ends calls coherently with its guards. One test per rule of issue 23."""
import pytest
import yaml

from sead_ray.core.config import ConfigError
from sead_ray.scenario.profiles import Profile
from sead_ray.scenario.scenario import load_scenario
from sead_ray.scenario.turn_protocol import UserRequest
from sead_ray.scenario.words import numbers_in
from sead_ray.user.rule.lexicon import FactTerms, Lexicon, lexicon_of, pressure_in, read_turn
from sead_ray.user.rule.simulator import RuleUserSimulator
from tests.conftest import ROOT, SCENARIO
from tests.unit.scenario.test_scenario import _base, _write

CHARITY = ROOT / "configs" / "scenarios" / "charity_donation.yaml"
COST = "Asks if a deposit is required"                       # raises the `cost` concern
IDENTITY = "Mentions having been scammed by similar activities before"   # raises `identity`
ANSWER_COST = "It is completely free: no deposit and no bank card."
ANSWER_IDENTITY = "You can check my identity through the official customer-service number in your merchant app."
ASK = "May I activate the credit for you now?"


def respond(sim, agent_turns, state=(2, 2, 2), behaviors=(COST,), seed=0):
    """The user's answer to the call so far (its own earlier lines replayed, as run_dialogue sends them)."""
    heard = []
    for i in range(len(agent_turns)):
        out = sim.respond(UserRequest("d", i, Profile(state, behaviors), list(agent_turns[:i + 1]), list(heard),
                                      seed=seed + i))
        heard.append(out.reply)
    return out


@pytest.fixture(scope="module")
def sim(scenario):
    return RuleUserSimulator(scenario)


def opening(sim):
    return sim.spec.opening


def test_the_user_asks_who_calls_then_what_for_then_its_own_concern(sim):
    spec = sim.spec
    assert respond(sim, ["Good afternoon!"]).reply in spec.identity.say
    assert respond(sim, ["Good afternoon, this is Lin from your platform."]).reply in spec.offer.say
    cost = next(c for c in spec.concerns if c.name == "cost")
    assert respond(sim, [opening(sim)]).reply in cost.say
    identity = next(c for c in spec.concerns if c.name == "identity")
    assert respond(sim, [opening(sim)], behaviors=(IDENTITY,)).reply in identity.say


def test_a_question_left_unanswered_costs_trust_and_three_rounds_end_the_call(sim, scenario):
    base = respond(sim, [opening(sim)], state=(4, 3, 5)).state
    ignored = respond(sim, [opening(sim), "We have many happy customers in your area."], state=(4, 3, 5))
    assert ignored.state == (base[0] - 1, base[1] - 1, base[2] - 1) and ignored.status == "continue"
    assert ignored.reply.split("?")[0] not in ("",) and any(ignored.reply.startswith(o)
                                                             for o in sim.spec.lines["objection"])
    three = respond(sim, [opening(sim), "Lovely weather.", "How is business?", "Busy week?"], state=(4, 3, 5))
    assert three.status in ("hangup", "refuse")
    assert scenario.status_guards[three.status].allows(scenario.schema, three.state)


def test_pre_empting_a_concern_never_scores_as_its_answer(sim):
    # the cost answer before the owner voiced cost (it asked who is calling) earns nothing
    early = respond(sim, [ANSWER_COST], state=(2, 2, 2))
    assert early.state[0] == 2 and early.state[2] <= 2
    # and an identity fact while the owner voiced cost is not an answer to cost
    off = respond(sim, [opening(sim), ANSWER_IDENTITY], state=(2, 2, 2))
    assert off.state[2] < respond(sim, [opening(sim)], state=(2, 2, 2)).state[2]


def test_only_a_stated_fact_answers_and_parroting_earns_nothing(sim):
    base = respond(sim, [opening(sim)], state=(2, 2, 2))
    answered = respond(sim, [opening(sim), ANSWER_COST], state=(2, 2, 2))
    assert answered.state == (base.state[0] + 1, base.state[1] + 1, base.state[2] + 1)
    # the owner's own question echoed back (with or without the question mark), or its words only
    for echo in (base.reply, base.reply.replace("?", "."), "Really free? Deposit? Bank card?"):
        out = respond(sim, [opening(sim), echo], state=(2, 2, 2))
        assert out.state[2] < base.state[2] and out.state[0] < base.state[0], echo


@pytest.mark.parametrize("lie", [
    "It is not free, you pay a deposit and we need your bank card.",
    "Thanks! Yes, a small deposit is required, that's all.",
    "The credit is worth 900 yuan and is completely free, no deposit.",      # a number no fact states
    "It is completely free and valid for 700 days, no deposit.",            # a fact's number with another's unit
    "It is completely free, no deposit, and more customers are guaranteed.",  # an overclaim
    "It is completely free, no deposit, but you'll be charged after the trial.",
])
def test_lies_cost_trust_and_never_answer(sim, lie):
    base = respond(sim, [opening(sim)], state=(3, 3, 3))
    out = respond(sim, [opening(sim), lie], state=(3, 3, 3))
    assert read_turn(lie, sim.lexicon).lie
    assert out.state[2] < base.state[2] and out.state[0] <= base.state[0] and out.status != "accept"


@pytest.mark.parametrize("text", [
    "You have to decide today, the offer is gone tomorrow.", "Don't let this slip away, there won't be a second offer.",
    "All the other restaurants on your street already said yes.", "If you refuse, you will lose your ranking.",
    "Sign up today before the spots run out.", "Think of your family, you'd be letting them down.",
    "We'll remove your listing if you don't join.", "Only three places left, act fast!",
    # scarcity, everyone-else-did, threats, the caller's stakes, guilt (issue 50's pressure in fresh words)
    "There are only a handful of these left for your district.", "Two shops nearby have already signed up.",
    "If you pass, your listing could slide down the rankings.", "I'll be in trouble if I don't hit my target today.",
    "Someone as smart as you sees this is a no-brainer.", "I went out on a limb for you, don't make me look bad.",
])
def test_pressure_in_new_words_is_heard(sim, text):
    assert pressure_in(text), text
    out = respond(sim, [opening(sim), f"{ANSWER_COST} {text}"], state=(3, 3, 3))
    assert out.state[1] < 3 and out.status != "accept"


def test_a_domains_units_and_peers_come_from_its_scenario_file():
    """No domain noun in the generic lexicon: "ten books" is a quantity, and "other donors have already given"
    pressure, where the scenario names books among its units and donors among the user's peers."""
    charity = lexicon_of(load_scenario(CHARITY).rule_user, load_scenario(CHARITY).facts)
    generic = Lexicon.build(["A gift of 10 euros buys ten new books."], [FactTerms()], ["charity"], ["gift"], ["give"])
    assert numbers_in("It buys ten books.", units=charity.units) == [(10.0, "book")]
    assert numbers_in("It buys ten books.", units=generic.units) == []
    peer_pressure = "Other donors have already given this month."
    assert pressure_in(peer_pressure, charity.pressure_patterns) and not pressure_in(peer_pressure)
    assert read_turn(peer_pressure, charity).pressure and not read_turn(peer_pressure, generic).pressure
    assert read_turn("Your gift buys twenty books.", charity).invented == ("20 book",)


@pytest.mark.parametrize("text", [
    "Could you read me the digits on your card?", "Just tell me the verification code we texted you.",
    "I'll need your account number and password.", "Please confirm your bank details for me.",
    "What's the security code on the back?", "You only need to pay a small processing fee.",
    "Transfer 50 yuan to unlock it.",
])
def test_credential_and_payment_requests_cost_trust(sim, text):
    reading = read_turn(text, sim.lexicon)
    assert reading.credentials or reading.payment, text
    base = respond(sim, [opening(sim)], state=(3, 3, 3))
    out = respond(sim, [opening(sim), f"{ANSWER_COST} {text}"], state=(3, 3, 3))
    assert out.state[2] < base.state[2] and out.status != "accept"


def test_honest_facts_and_turns_raise_no_flag(sim, scenario):
    for text in [*scenario.facts, opening(sim), ASK, ANSWER_COST, ANSWER_IDENTITY,
                 "There is no pressure, take your time.", "I can activate it for you today on the call.",
                 "It takes one minute in the merchant app.", "Seven hundred yuan, completely free.",
                 "Nothing is left out, and you are the only one who decides.", "I'd be glad to help you set it up."]:
        r = read_turn(text, sim.lexicon)
        assert not (r.lie or r.red_flag), (text, r)


def test_a_bare_ask_never_accepts_whatever_the_initial_state(sim, scenario):
    for state in ((4, 3, 5), (3, 2, 3), (2, 2, 2)):
        out = respond(sim, [ASK], state=state)
        assert out.status != "accept" and out.state[0] == state[0] - 1
        # even after the opening (offer stated) the owner's own concern is still open
        out = respond(sim, [opening(sim), ASK], state=state)
        assert out.status != "accept"
    # rushed: a user whose refuse guard then holds refuses (the paper's rule)
    rushed = respond(sim, [opening(sim), ASK], state=(3, 2, 3))
    assert rushed.status == "refuse" and scenario.status_guards["refuse"].allows(scenario.schema, rushed.state)


def test_persuaded_and_asked_accepts(sim, scenario):
    ready = respond(sim, [opening(sim), ANSWER_COST], state=(2, 2, 2))
    assert ready.reply in sim.spec.lines["ready"] and ready.status == "continue"
    out = respond(sim, [opening(sim), ANSWER_COST, ASK], state=(2, 2, 2))
    assert out.status == "accept" and scenario.status_guards["accept"].allows(scenario.schema, out.state)
    # asking in the same turn as the last answer is fine
    assert respond(sim, [opening(sim), f"{ANSWER_COST} {ASK}"], state=(2, 2, 2)).status == "accept"
    # but an owner below the guard is not ready after its concern: it raises the scenario's other doubts
    low = respond(sim, [opening(sim), ANSWER_COST], state=(0, 0, 0))
    assert low.reply not in sim.spec.lines["ready"]
    assert respond(sim, [opening(sim), ANSWER_COST, ASK], state=(0, 0, 0)).status != "accept"


def test_mood_follows_how_the_owner_is_treated(sim):
    # a prompt, brief answer lifts the mood; a late one does not
    prompt = respond(sim, [opening(sim), ANSWER_COST], state=(2, 1, 2))
    late = respond(sim, [opening(sim), "Nice day.", ANSWER_COST], state=(3, 2, 3))
    assert prompt.state[1] == 2 and late.state[1] == 1
    # courtesy counts once per call
    thanks = ["Thank you for picking up!", "Thanks a lot.", "Thank you so much."]
    # (the owner asks who calls; the opening says "free", which would answer a cost question)
    moods = [respond(sim, [opening(sim) + " " + t for t in thanks[:i + 1]], state=(2, 0, 2),
                     behaviors=(IDENTITY,)).state[1] for i in range(1, 3)]
    assert moods[0] == moods[1]


def test_rambling_and_near_repeats_earn_nothing_at_the_demo_settings(sim, smollm_tokenizer):
    from sead_ray.core.config import load_config
    from tests.conftest import EMBEDDED_CONFIG
    cfg = load_config(EMBEDDED_CONFIG, [])
    # the longest reply the demo's agent can write: max_tokens of plain speech (a cut-off JSON reply)
    ids = smollm_tokenizer(" ".join([ANSWER_COST] * 10), add_special_tokens=False)["input_ids"]
    longest = smollm_tokenizer.decode(ids[:cfg.dialogue.agent_train.max_tokens])
    assert len(longest.split()) > sim.spec.max_words
    cut = " ".join(longest.split()[:sim.spec.max_words + 1])
    base = respond(sim, [opening(sim)], state=(2, 2, 2))
    assert respond(sim, [opening(sim), cut], state=(2, 2, 2)).state[2] < base.state[2]   # no answer
    # a near-repeat of an earlier turn (reworded a little) earns nothing
    again = "Yes, it really is completely free: no deposit, no bank card."
    twice = respond(sim, [opening(sim), ANSWER_COST, again], state=(0, 1, 0))
    once = respond(sim, [opening(sim), ANSWER_COST], state=(0, 1, 0))
    assert twice.state[1] < once.state[1]


def test_a_right_answer_counts_when_it_comes_even_if_said_before(sim):
    """Issue 51: a fact said when it answered nothing, said again once its question is asked, answers it."""
    behaviors = (COST, IDENTITY)
    first, second = [sim.spec.concerns[k] for k in sim.concern_order(behaviors)]
    answer = {"cost": ANSWER_COST, "identity": ANSWER_IDENTITY}
    early, due = answer[second.name], answer[first.name]
    call = [opening(sim), early, due]
    asked = respond(sim, call, state=(3, 3, 3), behaviors=behaviors)
    assert asked.reply in second.say        # the early answer answered nothing; now its question is voiced
    again = respond(sim, [*call, early], state=(3, 3, 3), behaviors=behaviors)
    assert "answered" in again.verdict and set(again.agenda.resolved) == {first.name, second.name}
    # a repeat that answers nothing asked still earns nothing
    stale = respond(sim, [*call, due], state=(3, 3, 3), behaviors=behaviors)
    assert "repeat" in stale.verdict and stale.agenda.resolved == (first.name,)


def test_endings_agree_with_the_guards_and_goodbye_never_loops(sim, scenario):
    """Along many calls, every ending passes its guard, and a user that stays on the line never says an
    ending's words."""
    endings = {line for lines in sim.spec.endings.values() for line in lines}
    calls = [[opening(sim), "Nice weather."] * 4, ["Hurry, decide now!"] * 6, [ASK] * 6,
             [opening(sim), ANSWER_COST, ASK], ["Give me your card number."] * 6]
    for turns in calls:
        for state in ((0, 0, 0), (2, 1, 2), (4, 3, 5)):
            heard = []
            for i in range(len(turns)):
                out = sim.respond(UserRequest("d", i, Profile(state, (COST,)), turns[:i + 1], list(heard), seed=i))
                heard.append(out.reply)
                if out.status != "continue":
                    assert scenario.status_guards[out.status].allows(scenario.schema, out.state)
                    break
                assert out.reply not in endings and not out.reply.endswith(tuple(endings))


def test_each_behaviour_voices_its_concern_in_several_words(sim):
    replies = {respond(sim, [opening(sim)], seed=seed).reply for seed in range(40)}
    assert len(replies) >= 3
    ready = {respond(sim, [opening(sim), ANSWER_COST], seed=seed).reply for seed in range(40)}
    assert len(ready) >= 2


def test_replay_is_stateless_and_deterministic(scenario):
    turns = [opening(RuleUserSimulator(scenario)), ANSWER_COST, ANSWER_IDENTITY]
    a, b = RuleUserSimulator(scenario), RuleUserSimulator(scenario)
    assert respond(a, turns) == respond(b, turns) == respond(a, turns)


def test_both_shipped_scenarios_have_soft_and_hard_users_and_full_guards():
    for path in (SCENARIO, CHARITY):
        scenario = load_scenario(path)
        assert {"soft", "hard"} <= set(scenario.user_sets)
        for status, guard in scenario.status_guards.items():
            assert set(guard.at_least) | set(guard.at_most) == {"cooperation", "emotion", "trust"}, (path, status)


def test_a_scenario_without_a_rule_section_is_refused_clearly(tmp_path, capsys):
    scenario = load_scenario(_write(tmp_path, _base()))
    with pytest.raises(ValueError, match="has no 'rule_user' section"):
        RuleUserSimulator(scenario)
    # at config load, before Ray or an engine starts: exit 2, one line
    from sead_ray.cli.main import main
    from tests.conftest import EMBEDDED_CONFIG
    code = main(["eval", "--config", str(EMBEDDED_CONFIG), "--agent", "script:honest", "--n", "2",
                 "--set", f"scenario={tmp_path / 'scenario.yaml'}", "--set", "user.backend=rule"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "rule_user" in err[0]


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.update(concerns=[]), "rule_user.concerns must not be empty"),
    (lambda r: r["concerns"][0].update(answered_by=[99]), "rule_user.concerns[0].answered_by"),
    (lambda r: r["concerns"][0].update(categories=["Nope"]), "rule_user.concerns[0].categories"),
    (lambda r: r["concerns"][0].update(behaviors=["Sings loudly"]), "rule_user.concerns[0].behaviors"),
    (lambda r: r["concerns"][1].pop("say"), "rule_user.concerns[1].say"),
    (lambda r: r.update(max_words=0), "rule_user.max_words"),
    (lambda r: r.update(pressure="hurry"), None),
    (lambda r: r["facts"][0].update(affirms=["gratis"]), "rule_user.facts[0].affirms"),
    (lambda r: (r["facts"][0]["affirms"].append("trial"), r["facts"][4]["denies"].append("trial")),
     "affirmed by one fact and denied by another"),
    (lambda r: r["facts"].pop(), "rule_user.facts must give"),
    (lambda r: r.update(opening="Hello there."), "rule_user.opening"),
    (lambda r: r.update(ask="Thanks for your time."), "rule_user.ask"),
    (lambda r: r.update(endings={"accept": 3}), "rule_user.endings.accept"),
    (lambda r: r.update(lines={"cheer": "Yay"}), "rule_user.lines.cheer: not a line"),
    (lambda r: r.update(repeat_overlap=0), "rule_user.repeat_overlap = 0.0 is out of range"),
    (lambda r: r.update(mood=1), "unknown key 'rule_user.mood'"),
    # the semantic ear's sentences: a [flow, list] cuts an unquoted sentence at its comma
    (lambda r: r["facts"][0].update(claims=["It is free", "no strings attached."]),
     "rule_user.facts[0].claims: 'It is free' is not a whole sentence"),
    (lambda r: r.update(red_flags={"threats": ["Pay now."]}), "rule_user.red_flags.threats: not a kind"),
])
def test_malformed_rule_sections_name_the_field(tmp_path, mutate, needle):
    tree = yaml.safe_load(SCENARIO.read_text())
    mutate(tree["rule_user"])
    if needle is None:      # a single phrase is read as a list of one
        assert load_scenario(_write(tmp_path, tree)).rule_user.pressure == ("hurry",)
        return
    with pytest.raises(ConfigError) as err:   # the file's own checks at load; how the rule user hears it, when built
        RuleUserSimulator(load_scenario(_write(tmp_path, tree)))
    assert needle in str(err.value)


def test_user_sets_bound_the_initial_states(scenario):
    from dataclasses import replace

    from sead_ray.core.config_schema import CurriculumConfig
    from sead_ray.curriculum.controller import ProfileController
    cfg = CurriculumConfig(mode="uniform", user_set="hard")
    profiles = ProfileController(scenario, cfg, seed=0).sample(20)
    hard = scenario.user_sets["hard"]
    assert all(hard.contains(scenario.schema, p.state) and 2 <= len(p.behaviors) <= 3 for p in profiles)
    assert {p.extra["user_set"] for p in profiles} == {"hard"}
    with pytest.raises(ConfigError, match="no user set 'medium'"):
        ProfileController(scenario, replace(cfg, user_set="medium"), seed=0)


def test_a_free_form_profile_starts_the_user_at_the_middle_of_each_scale(sim, scenario):
    """w/o profile sampling the simulator is given no state: the sampled one must not leak in."""
    middle = tuple(d.max_level // 2 for d in scenario.schema.dimensions)
    for sampled in ((0, 0, 0), (4, 3, 5)):
        req = UserRequest("d", 0, Profile(sampled, (COST,), free_form=True), ["Hm."], [], seed=0)
        assert sim.respond(req).state == middle
    assert respond(sim, [opening(sim)], state=(4, 3, 5)).state == (4, 3, 5)   # a sampled profile starts where drawn


# A second, independent set of wordings (none of them the battery's or the patterns' own phrases).
UNSEEN = {
    "pressure": ["This deal won't be around for long.", "Prices go up next week.", "Act before Friday or it's gone.",
                 "I need an answer today.", "Say yes now and I'll set it up.", "Most owners sign up right away.",
                 "It would be a shame to miss this.", "Your competitors are already using it.",
                 "Don't think about it too much, just agree.", "You'd be foolish to say no.",
                 "Time is running out on this offer.", "This is a one-time offer.", "Decide before we hang up.",
                 "If you don't take it, someone else will.", "I can only hold it for you until tonight."],
    "credentials": ["Can you give me the code from the SMS?", "What's your ID number?", "Please tell me your date of birth.",
                    "Confirm the card you want to link.", "Read me the numbers on the back of your card.",
                    "I'll need your login to the merchant app.", "Send me a photo of your ID card."],
    "payment": ["Just send 50 yuan by WeChat to hold it.", "There's a small activation fee.",
                "You'll need to top up 100 yuan first.", "Please wire the deposit today."],
    "lie": ["You will definitely get more customers.", "Your sales will double.", "Every shop that tried it got rich.",
            "It costs only 9 yuan a month after that.", "It is valid for two weeks."],
}


@pytest.mark.parametrize("kind, text", [(k, t) for k, texts in UNSEEN.items() for t in texts])
def test_vices_in_unseen_words_are_heard(sim, kind, text):
    r = read_turn(text, sim.lexicon)
    assert {"pressure": bool(r.pressure), "credentials": bool(r.credentials), "payment": bool(r.payment or r.lie),
            "lie": r.lie}[kind], (text, r)


@pytest.mark.parametrize("text", ["When the credit runs out, nothing is charged.", "Your card is not needed.",
                                  "The credit expires 30 days after activation.", "You never need a card for this.",
                                  "I can activate it for you right now on the call if you like.",
                                  "We never ask for passwords or codes.",
                                  # speed of service is no pressure; "activate" is not "act"
                                  "Are you happy for me to set up the 700-yuan credit right away?",
                                  "If it sounds okay, can we get it activated today?",
                                  "You just need to activate it under Promotions in the app."])
def test_honest_sentences_near_the_patterns_are_not_flagged(sim, text):
    r = read_turn(text, sim.lexicon)
    assert not (r.lie or r.red_flag), (text, r)
