"""The `rule` simulator is scenario-driven and hard to game: only an answer to the concern the user just
voiced, with a fact that answers it, moves the state; red flags, pressure, keyword salads, repeats and
early closes earn nothing or cost; endings follow the scenario's status guards."""
import pytest
import yaml

from sead_ray.config import ConfigError
from sead_ray.dialogue import UserRequest
from sead_ray.profiles import Profile
from sead_ray.rule_user import RuleUserSimulator
from sead_ray.scenario import load_scenario
from tests.conftest import SCENARIO
from tests.test_scenario import _base, _write

COST = "Asks if a deposit is required"             # Cost_Concerns: "Is this really free? ..."
IDENTITY = "Asks if the caller is an AI robot"     # Trust_and_Skepticism: "How do I know you are really ..."
ANSWER_COST = "It is completely free: no deposit and no bank card."
ANSWER_IDENTITY = "You can check my identity with the official customer-service number in your app."


def respond(sim, agent_turns, state=(2, 2, 2), behaviors=(COST,)):
    req = UserRequest("d", len(agent_turns) - 1, Profile(state, behaviors), list(agent_turns), [], seed=0)
    return sim.respond(req)


@pytest.fixture
def sim(scenario):
    return RuleUserSimulator(scenario)


def test_the_user_voices_its_own_concern_first(sim, scenario):
    concerns = scenario.rule_user.concerns
    assert respond(sim, ["Hello."], behaviors=(IDENTITY,)).reply == concerns[1].say
    assert respond(sim, ["Hello."], behaviors=(COST,)).reply == concerns[0].say


def test_only_an_answer_to_the_voiced_concern_moves_the_state(sim):
    greeting = "Good afternoon, this is Lin."
    base = respond(sim, [greeting], state=(1, 2, 1)).state
    answered = respond(sim, [greeting, ANSWER_COST], state=(1, 2, 1))
    assert answered.state == (base[0] + 1, base[1], base[2] + 1) and answered.status == "continue"
    # a true fact, but for a concern the user did not raise: nothing
    off_topic = respond(sim, [greeting, ANSWER_IDENTITY], state=(1, 2, 1))
    assert off_topic.state == base
    # the next concern is voiced once the first is resolved
    assert "How do I know" in answered.reply


def test_keyword_salad_repeats_and_rambling_earn_nothing(sim):
    salad = ("free deposit bank card, official customer-service number identity, search results page views, "
             "valid 30 days activation takes one minute")
    out = respond(sim, [salad])
    assert out.state == (2, 1, 2) and out.reply.startswith(sim.spec.objection)
    # the same answer twice: the concern is resolved, the repeat earns nothing and annoys
    twice = respond(sim, [ANSWER_COST, ANSWER_COST], state=(1, 2, 1))
    assert twice.state == (2, 1, 2)
    long = ANSWER_COST + " " + " ".join(["really"] * 60)
    assert respond(sim, [long]).state == (2, 1, 2)


def test_red_flags_cost_trust_and_mood(sim):
    out = respond(sim, ["To activate it I need your bank card number, hurry, last chance."], state=(2, 2, 2))
    assert out.state == (2, 1, 1)
    # a red flag inside an otherwise correct answer still earns no credit
    assert respond(sim, [ANSWER_COST + " Please read me your card number."]).state == (2, 1, 1)


def test_asking_too_early_costs_cooperation_and_asking_when_ready_closes(sim):
    early = respond(sim, ["Shall I activate the credit for you now?"], state=(2, 2, 2))
    assert early.state == (1, 2, 2) and early.status == "continue"
    ready = respond(sim, ["Shall I activate the credit for you now?"], state=(3, 2, 3))
    assert ready.status == "accept"


def test_the_paper_acceptance_a_ready_state_after_an_answer(sim, scenario):
    # (2, 2, 2) + an answer = (3, 2, 3): the accept guard holds, the owner accepts without being asked
    out = respond(sim, [ANSWER_COST], state=(2, 2, 2))
    assert out.status == "accept" and scenario.status_guards["accept"].allows(scenario.schema, out.state)
    # below the guard an answer alone does not close
    assert respond(sim, [ANSWER_COST], state=(1, 2, 1)).status == "continue"


def test_politeness_raises_mood_a_limited_number_of_times(sim):
    thanks = ["Thank you for your time.", "Thanks a lot, sorry to bother you.", "Thank you so much, please hear me out."]
    moods = [respond(sim, thanks[:i + 1], state=(2, 0, 2)).state[1] for i in range(3)]
    assert moods == [1, 2, 2]


def test_hangup_follows_a_penalised_turn_at_the_bottom(sim):
    out = respond(sim, ["Give me your bank card number now."], state=(1, 1, 1))
    assert out.status == "hangup" and out.state == (1, 0, 0)


def test_replay_is_stateless_and_deterministic(scenario):
    turns = ["Hello.", ANSWER_COST, ANSWER_IDENTITY]
    a, b = RuleUserSimulator(scenario), RuleUserSimulator(scenario)
    assert respond(a, turns) == respond(b, turns) == respond(a, turns)


def test_a_scenario_without_a_rule_section_is_refused_clearly(tmp_path):
    scenario = load_scenario(_write(tmp_path, _base()))
    with pytest.raises(ValueError, match="has no 'rule_user' section"):
        RuleUserSimulator(scenario)


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.update(concerns=[]), "rule_user.concerns' must be a non-empty list"),
    (lambda r: r["concerns"][0].update(answered_by=[99]), "rule_user.concerns[0].answered_by"),
    (lambda r: r["concerns"][0].update(categories=["Nope"]), "rule_user.concerns[0].categories"),
    (lambda r: r["concerns"][1].pop("say"), "rule_user.concerns[1].say"),
    (lambda r: r.update(max_words=0), "rule_user.max_words"),
    (lambda r: r.update(red_flags="pay"), "rule_user.red_flags"),
    (lambda r: r.update(endings={"accept": "ok"}), "rule_user.endings"),
    (lambda r: r.update(mood=1), "unknown field(s) ['mood']"),
])
def test_malformed_rule_sections_name_the_field(tmp_path, mutate, needle):
    tree = yaml.safe_load(SCENARIO.read_text())
    mutate(tree["rule_user"])
    with pytest.raises(ConfigError) as err:
        load_scenario(_write(tmp_path, tree))
    assert needle in str(err.value)


def test_user_sets_bound_the_initial_states(scenario):
    from types import SimpleNamespace

    from sead_ray.controller import ProfileController
    cfg = SimpleNamespace(mode="uniform", n_max=200, smoothing="none", beta_prior=2.0, easy_above=0.6,
                          hard_below=0.4, profile_sampling=True, min_behaviors=1, max_behaviors=3, user_set="hard")
    profiles = ProfileController(scenario, cfg, seed=0).sample(20)
    hard = scenario.user_sets["hard"]
    assert all(hard.contains(scenario.schema, p.state) and 2 <= len(p.behaviors) <= 3 for p in profiles)
    assert {p.extra["user_set"] for p in profiles} == {"hard"}
    with pytest.raises(ConfigError, match="no user set 'medium'"):
        ProfileController(scenario, SimpleNamespace(**{**vars(cfg), "user_set": "medium"}), seed=0)


def test_a_free_form_profile_starts_the_user_at_the_middle_of_each_scale(sim, scenario):
    """w/o profile sampling the simulator is given no state: the sampled one must not leak in."""
    middle = tuple(d.max_level // 2 for d in scenario.schema.dimensions)
    greeting = ["Good afternoon, this is Lin."]
    for sampled in ((0, 0, 0), (4, 3, 5)):
        req = UserRequest("d", 0, Profile(sampled, (COST,), free_form=True), greeting, [], seed=0)
        assert sim.respond(req).state == middle
    assert respond(sim, greeting, state=(4, 3, 5)).state == (4, 3, 5)   # a sampled profile starts where drawn
