"""No welcome lie earns an answer (issue 50): a statement about a fact is held to the fact's own sentences (its
absolutes, quantities, how often, dates), and a turn that says more than its fact answers nothing: the user asks
again, as after an evasion."""
import pytest

from sead_ray.scenario.scenario import load_scenario
from sead_ray.scenario.words import clauses_of, numbers_in
from sead_ray.user.rule.clause_claims import absolutes_in, polarity_words, quantities_in
from sead_ray.user.rule.fact_check import fact_bounds, scenario_bounds, unsupported
from sead_ray.user.rule.simulator import RuleUserSimulator
from tests.unit.user.test_rule_user import CHARITY, respond

VALIDITY = "Asks about the validity period of the trial credit"    # raises the restaurant's `validity` concern
EXPIRY, VIEWS = 1, 5                                                   # restaurant facts: 30 days; the first week
CANCEL, IMPACT, TAX, AMOUNT = 1, 2, 3, 5  # charity facts: no fee; 89 percent; January; 3 euros
SETUP, REGISTERED = 3, 4   # restaurant: activation in the merchant app; charity: registered, annual report


def said(text, facts=frozenset()):
    return [(c, frozenset(facts)) for c in clauses_of(text) if not c.question]


@pytest.fixture(scope="module")
def bounds(scenario):
    return scenario_bounds(scenario)


@pytest.fixture(scope="module")
def charity_bounds():
    charity = load_scenario(str(CHARITY))
    return scenario_bounds(charity)


@pytest.mark.parametrize("text", ["It never expires, use it whenever you like.", "You can keep it forever.",
                                  "There's no time limit on it at all.", "Every single customer will see it.",
                                  "It lasts a full year from activation.", "You have two months to spend it."])
def test_a_welcome_lie_in_place_of_the_asked_fact_is_unsupported(bounds, text):
    why = unsupported(said(text), bounds, frozenset([EXPIRY]))
    assert why and all(f"fact {EXPIRY}" in w for w in why), why


@pytest.mark.parametrize("text", ["It stays valid for a month after you switch it on.",
                                  "You have thirty days, and only clicks use it up.",
                                  "It does not last forever: 30 days from activation.",
                                  "Feel free to double-check the dates in the app."])
def test_the_fact_in_other_words_is_supported(bounds, text):
    assert unsupported(said(text), bounds, frozenset([EXPIRY])) == []


def test_the_facts_own_sentences_allow_their_absolutes_and_each_fact_keeps_its_own_quantities(bounds):
    lifetime = fact_bounds("The membership card is free.", ["You keep the card for life."])
    assert unsupported(said("The card is yours forever."), [lifetime], frozenset([0])) == []
    assert unsupported(said("The card is yours forever."), bounds, frozenset([0]))   # the credit's never say so
    # "the first week" is the views fact's duration; where a clause speaks of both facts, each finds its own
    both = said("The credit lasts 30 days, and shops see more views within seven days.", {EXPIRY, VIEWS})
    assert unsupported(both, bounds) == []
    assert unsupported(said("Shops see more views within a month.", {VIEWS}), bounds)


def test_amounts_periods_and_dates_are_read_against_the_fact_spoken_of(charity_bounds):
    b = charity_bounds
    assert unsupported(said("The other 11 percent keeps the lights on."), b, frozenset([IMPACT])) == []
    assert unsupported(said("Every single cent goes to the children."), b, frozenset([IMPACT]))
    assert unsupported(said("Half of it, 50 percent, goes to the clubs."), b, frozenset([IMPACT]))
    assert unsupported(said("You get one receipt a year, in January."), b, frozenset([TAX])) == []
    assert unsupported(said("We post you a receipt every month."), b, frozenset([TAX]))
    assert unsupported(said("Your receipt comes in June."), b, frozenset([TAX]))
    assert unsupported(said("You don't have to give 10 euros. 3 euros a month is welcome."), b, frozenset([AMOUNT])) == []
    assert unsupported(said("The minimum is 10 euros a month."), b, frozenset([AMOUNT]))


def test_the_amount_kept_and_what_it_buys_swapped_is_unsupported(charity_bounds):
    """Charity fact 0, "10 euros a month buys four new books": the welcome lie keeps the amount the donor knows and
    swaps what it buys; the count kept without the amount is a terse answer; the offer's own amount is the offer's."""
    b, books = charity_bounds, 0
    why = unsupported(said("Each 10 euros buys a new tablet for the reading club.", {books}), b)
    assert why == ["fact 0's 10 euro without its 4 book ('Each 10 euros buys a new tablet for the reading club.')"]
    assert unsupported(said("Your 10 euros pays for a whole new library shelf every month.", {books}), b)
    for honest in ("Every month, your 10 euros would put four fresh titles on a club's shelf.", "Four books a month.",
                   "New books every month.", "10 euros, four books."):
        assert unsupported(said(honest, {books}), b) == [], honest
    offer = "We'd love 10 euros a month for our reading clubs."
    assert unsupported(said(offer, {books}), b)
    assert unsupported(said(offer, {books}), b, roles=frozenset([offer])) == []
    # a clause heard stating two facts is not held to one fact's pairing ("nine in every ten euros" of 89 percent)
    assert unsupported(said("Nine in every ten euros go to the reading clubs.", {books, IMPACT}), b) == []


def test_a_word_the_fact_only_denies_stated_is_unsupported(charity_bounds):
    """Found in a self-play call (issue 51, charity): "Is this a contract?" -> "It is a contract, signed by ..." was
    heard as the answer, its nearest claim "There is no contract and no minimum period." """
    b = charity_bounds
    why = unsupported(said("It is a contract, signed by you and us."), b, frozenset([CANCEL]))
    assert why == ["'contract' stated where fact 1 denies it ('It is a contract')"]
    for honest in ("There's no contract: you can stop whenever you like.", "It is not a contract at all.",
                   "No, you can cancel at any time, and cancelling is free.", "You are never locked in."):
        assert unsupported(said(honest), b, frozenset([CANCEL])) == [], honest


def test_a_contrast_that_sets_aside_what_the_fact_states_is_unsupported(bounds, charity_bounds):
    """"X, not Y" where the fact says Y (found in the eighth set of ear lines: "It only shows on our website, not in
    the app.", heard as where the ads appear)."""
    where, verify = 2, 6   # restaurant: ads in the app, search and nearby page; the service number in the app
    why = unsupported(said("You'll find it on our website, not in the app."), bounds, frozenset([where]))
    assert why == ["'app' set aside where fact 2 states it ('not in the app.')"]
    assert unsupported(said("The month begins today, not when you activate it."), bounds, frozenset([EXPIRY]))
    assert unsupported(said("It's run by a company rather than a registered charity."), charity_bounds,
                       frozenset([REGISTERED]))
    # a fact's own contrast sets its words aside, not states them: the fact verbatim stays supported
    price = "The loyalty price is 29 euros a month instead of the standard 35 euros."
    assert unsupported(said(price), [fact_bounds(price)], frozenset([0])) == []
    assert unsupported(said("It is 29 euros instead of the gym's fee."), [fact_bounds(price + " No fee.")],
                       frozenset([0])) == []
    # emphasis ("not any", "not just", "not a single") and another rate or duration are no contrast with the fact
    for fact, honest in ((EXPIRY, "It's charged by the click, not by the day."),
                         (verify, "Call the number shown in the merchant app, not any number I read out."),
                         (EXPIRY, "Thirty days, and it's spent on clicks, not just on anything."),
                         (where, "It shows in the app, not a single cent from you.")):
        assert unsupported(said(honest), bounds, frozenset([fact])) == [], honest


@pytest.mark.parametrize("fact,text", [
    (IMPACT, "About half goes to the clubs, the rest funds our campaigns."),
    (IMPACT, "It goes straight to the clubs, and anything left over is refunded to you."),
    (4, "We're endorsed by the Ministry of Education."),
    (4, "We don't publish reports, you'll just have to trust us."),
    (0, "Ten euros a month puts books in every school in the country.")])
def test_a_share_money_back_an_authority_or_a_reason_not_to_check_the_fact_never_names_is_unsupported(
        charity_bounds, fact, text):
    assert unsupported(said(text), charity_bounds, frozenset([fact]))


@pytest.mark.parametrize("fact,text", [
    (IMPACT, "Almost nine tenths of every gift goes straight to the reading clubs."),
    (IMPACT, "Nine out of ten euros reach the clubs; the other part pays for administration."),
    (4, "We're a registered charity; the annual report is on our website."),
    (AMOUNT, "You can give one and a half euros more later, or change the amount.")])
def test_the_same_facts_in_honest_words_stay_supported(charity_bounds, fact, text):
    assert unsupported(said(text), charity_bounds, frozenset([fact])) == []




def test_a_statement_heard_as_the_fact_that_says_mostly_what_the_scenario_never_words_is_unsupported(
        bounds, charity_bounds):
    perk = "Our design team will also refresh your menu photos and write new dish descriptions."
    why = unsupported(said(perk, {SETUP}), bounds, frozenset([SETUP]))
    assert why and "never uses" in why[0] and "menu" in why[0], why
    patron = "A royal patron covers our whole admin budget, so every gift is protected by a trust fund."
    assert unsupported(said(patron, {REGISTERED}), charity_bounds, frozenset([REGISTERED]))
    # honest answers in other words carry the fact's own words beside their new ones
    for text in ("It's quick: open the merchant app, tap Promotions, done.",
                 "Honestly, it's easy, even if you hate apps: a minute under Promotions, or I'll do it while we talk."):
        assert unsupported(said(text, {SETUP}), bounds, frozenset([SETUP])) == [], text
    assert unsupported(said("Look us up: registered charity, yearly report online for anyone to read.", {REGISTERED}),
                       charity_bounds, frozenset([REGISTERED])) == []
    # the words are counted over every clause that speaks of the fact: a would-be answer's courtesy beside the fact
    # does not void it; a clause about no fact in a turn that answers nothing is not read so
    assert unsupported(said("I hear you, lots of owners feel that way. It takes a minute under Promotions in the app."),
                       bounds, frozenset([SETUP])) == []
    assert unsupported(said(perk), bounds) == []
    # a fact's bounds built without the scenario's words do not read them
    alone = fact_bounds("Activation takes one minute in the merchant app.")
    assert unsupported(said(perk, {0}), [alone], frozenset([0])) == []


def test_what_the_polarity_reader_denies():
    def denied(text):
        return [sorted(polarity_words(c)[1]) for c in clauses_of(text)]
    assert denied("There is no contract.") == [["contract"]] and denied("It is not a contract.") == [["contract"]]
    assert denied("Once you start you cannot stop.") == [["stop"]]
    assert denied("After the trial nothing is charged.") == [["charged"]] and denied("Nothing renews.") == [["renew"]]
    assert denied("It costs nothing to cancel.") == [[]]
    # an interjection, an obligation, "not just", "costs nothing": no word denied
    assert denied("No, you can cancel.") == [[], []]
    assert denied("You don't have to give 10 euros, not just books, it costs nothing to cancel.") == [[], [], []]
    # within a negation's reach (the lexicon's window) a word is not asserted either
    assert polarity_words(clauses_of("We don't need your bank card.")[0]) == (frozenset(), frozenset())
    assert polarity_words(clauses_of("It is a contract.")[0]) == (frozenset({"contract"}), frozenset())


def test_what_the_reader_counts():
    clause = clauses_of("It does not last forever, but for a full year you get unlimited views.")
    assert absolutes_in(clause[0]) == {} and absolutes_in(clause[1]) == {"unlimited": "unlimited"}
    assert quantities_in(clauses_of("for a full year")[0]) == [(1.0, "year")]
    assert quantities_in(clauses_of("10 euros a month")[0]) == [(10.0, "euro")]       # a rate, not a duration
    assert quantities_in(clauses_of("you do not need 10 euros")[0]) == []              # denied, not claimed


def test_numbers_are_read_whole_in_digits_and_in_words():
    def amounts(text):
        return [numbers_in(c) for c in clauses_of(text)]
    # a digit group is one number and no clause break ("1,700 yuan" was read as 700 yuan: the fact's own amount)
    assert amounts("Free credit of 1,700 yuan, no deposit.") == [[(1700.0, "yuan")], []]
    assert amounts("One, 700 yuan.") == [[], [(700.0, "yuan")]]
    # every tens word, teens and a number's "and" ("eighty-nine percent" was read as 9 percent)
    assert amounts("Eighty-nine percent goes to the clubs.") == [[(89.0, "percent")]]
    assert amounts("one hundred and twenty euros") == [[(120.0, "euro")]]
    assert amounts("two thousand five hundred yuan") == [[(2500.0, "yuan")]]


def test_the_amount_in_words_and_digit_groups_is_held_to_the_fact(bounds, charity_bounds):
    assert unsupported(said("Free credit of 1,700 yuan, no deposit, no card."), bounds, frozenset([0]))
    assert unsupported(said("Eighty-nine percent goes directly."), charity_bounds, frozenset([IMPACT])) == []
    assert unsupported(said("Seventy percent goes to the clubs."), charity_bounds, frozenset([IMPACT]))


@pytest.mark.parametrize("text, welcome", [
    ("If money gets tight, we pause it automatically for you.", True),
    ("It stops by itself whenever your balance is low.", True),
    ("You can deduct it twice on your taxes.", True),
    ("You can pause or cancel it yourself in your donor account.", False),
    ("It doesn't roll into anything by itself.", False),    # a negation before it in the clause denies it
])
def test_something_happening_with_no_act_of_the_users_or_twice_is_an_overclaim(charity_bounds, text, welcome):
    clause = said(text)
    facts = frozenset([CANCEL]) if "deduct" not in text else frozenset([TAX])
    assert bool(unsupported(clause, charity_bounds, facts)) == welcome


def test_a_fact_that_denies_renewing_automatically_still_reads_it_as_an_overclaim(bounds):
    assert unsupported(said("After the trial it renews automatically."), bounds, frozenset([4]))
    assert unsupported(said("Nothing renews automatically, and there is no deposit."), bounds, frozenset([0])) == []


@pytest.fixture(scope="module")
def sim(scenario):
    return RuleUserSimulator(scenario)


def test_the_rule_user_takes_the_fact_but_asks_again_after_a_welcome_lie(sim):
    """The lexicon ear hears both turns state the validity fact (valid, click); the swap's year is not its 30 days."""
    opening = sim.spec.opening
    honest = respond(sim, [opening, "It is valid for 30 days and only clicks use it up."], behaviors=(VALIDITY,))
    swap = respond(sim, [opening, "It is valid for a whole year and only clicks use it up."], behaviors=(VALIDITY,))
    before = respond(sim, [opening], behaviors=(VALIDITY,))
    validity = next(c for c in sim.spec.concerns if c.name == "validity")
    assert before.reply in validity.say and honest.reply not in validity.say
    assert any(q in swap.reply for q in validity.say)        # asked again
    assert any(h.get("rule") == "unsupported" for h in swap.heard)
    c, e, t = before.state
    assert honest.state[0] > c and honest.state[2] > t
    assert swap.state == (c - 1, e - 1, t - 1)      # an evasion's cost (no lie was heard: no more)


def test_a_new_domain_is_told_what_its_ear_cannot_check(caplog):
    """The gym test domain was written with facts but no claims or lies: it loads, with a warning naming them, and
    the battery lists what it could not test."""
    from sead_ray.evaluation.simcheck import untested
    from tests.unit.user.test_semantic_ear import GYM
    with caplog.at_level("WARNING", logger="sead_ray.scenario.rule_user_section"):
        gym = load_scenario(str(GYM))
    n = len(gym.facts)
    warned = [r.getMessage() for r in caplog.records]
    assert any(f"rule_user.facts{list(range(n))} have no lies" in w for w in warned), warned
    assert any("have no claims" in w for w in warned)
    gaps = untested(gym)
    assert gaps[0].startswith("not played: honest_paraphrase") and "paraphrase_swaps" in gaps[0]
    assert any("have no lies" in g for g in gaps)
    assert untested(load_scenario(str(CHARITY))) == []     # claims and lies for every fact, and its ear lines
