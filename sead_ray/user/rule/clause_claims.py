"""What one clause claims, as the rule user's fact check reads it (fact_check.py holds each statement about a fact to
the fact's own sentences with these): the absolutes and overclaims it uses, by group; the quantities, shares, values,
how often and dates it states; the words it asserts or denies (polarity) and the words a contrast sets aside. Pure
text processing."""
from __future__ import annotations

from collections.abc import Sequence

from sead_ray.scenario.words import (
    DURATIONS,
    NEGATIONS,
    NUMBER_WORDS,
    UNITS,
    Clause,
    content_words,
    number_words_at,
    numbers_in,
    phrase,
    stem,
    word_keys,
)

# Absolutes and overclaims by group: a fact whose own sentences use one phrase of a group allows the group.
ABSOLUTES: dict[str, tuple[str, ...]] = {
    "forever": ("forever", "for ever", "permanent", "permanently", "never expire", "never run out", "not expire",
                "no expiry", "no expiration", "no end date", "no time limit", "lifetime", "for life", "for good",
                "indefinitely", "never end", "as long as you like", "as long as you want"),
    "unlimited": ("unlimited", "no limit", "limitless", "endless", "as much as you want", "as much as you like",
                  "as many as you want", "as many as you like"),
    "everyone": ("everyone", "everybody", "every single", "without exception", "no exception", "all of them",
                 "nationwide", "the whole country", "across the country", "the whole city", "every cent",
                 "every penny", "all of the money", "all the money", "all of your money"),
    "certain": ("guarantee", "guaranteed", "certainly", "definitely", "for sure", "100 percent", "without fail",
                "no risk", "risk free", "zero risk", "always work", "never fail", "cannot fail"),
    "multiplied": ("double", "doubled", "triple", "tripled", "twice", "times more", "time as many"),
    # something happening with no act of the user's, which the fact does not say ("it pauses itself automatically")
    "automatic": ("automatically", "automatic", "by itself", "by themselves", "on its own", "tops itself"),
    "first": ("the very first", "very first", "number one", "top spot", "right at the top", "first place"),
    "ever": ("nobody ever", "no one ever", "nothing ever", "never ever", "not ever"),
    # a restriction the fact does not make ("can only be turned on through our website", "only for major donors")
    "only": tuple(f"only {w}" for w in "be through by on in to for available apply applies sent shared i we our me "
                  "via accept from at".split()),
    "instant": ("instantly", "instant", "immediately", "overnight", "by tonight", "this morning", "on day one",
                "from day one"),
    "everywhere": ("everywhere", "every app", "all the apps", "every user", "every school", "every award",
                   "every charity award", "all the major"),
    # an authority that vouches for the caller or the offer, which the fact does not name
    "authority": ("endorsed", "endorse", "certified", "certifies", "certify", "accredited", "government",
                  "ministry", "united nations", "unesco", "most trusted", "largest", "biggest", "award winning"),
    # money coming back to the user, which the fact does not promise
    "money back": ("money back", "cash back", "in cash", "as cash", "paid out", "refund", "refunds", "refunded",
                   "returned to you", "returned to your account", "match it"),
    # a reason not to check what the user asked to check
    "unverifiable": ("trust me", "trust us", "have to trust", "no need to check", "no point calling",
                     "no point checking", "don't bother", "caller id", "confidential"),
}
# a group that is itself emphasis on a negation ("nobody ever"): no negation denies it
EMPHASIS = frozenset({"ever"})
# a group any negation before it in the clause denies, however far ("it doesn't roll into a paid plan by itself"), or
# "any" right before it ("no deposit, no card or any automatic renewal")
DENIED_FROM_AFAR = frozenset({"automatic"})
# ... but not in these words ("double-check"; "only if you agree" is a condition, not a restriction)
NOT_ABSOLUTE = tuple(phrase(p) for p in ("double check", "double checking", "only if", "only with", "only when",
                                         "only after", "only once"))
DURATION_LEADS = frozenset("for within in after over about lasts last lasting takes take than until".split())
FILLERS = frozenset("full whole entire complete single".split())   # "a full year" is a year
CALENDAR = frozenset("""january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday""".split()) - {"may"}   # "may" is mostly a verb
# how often: "monthly", "every month", "once a year", "10 euros a month"
PERIODS = {"day": "day", "week": "week", "month": "month", "quarter": "quarter", "year": "year"}
PERIODIC = {"daily": "day", "weekly": "week", "monthly": "month", "quarterly": "quarter", "yearly": "year",
            "annual": "year", "annually": "year"}
_GROUPS = {name: tuple(phrase(p) for p in items) for name, items in ABSOLUTES.items()}
# A negation whose scope is the content word right after it (past at most three of the skipped words): "there is no
# contract", "it is not a contract", "you can never stop", "nothing is charged", "nothing renews". Narrow on purpose:
# "No, you can cancel" is an answer, "costs nothing to cancel" and "not just books" deny nothing the polarity check
# should read.
SCOPED_NEGATIONS = frozenset("no not never without cannot nothing".split())
NEGATION_SKIPS = frozenset("a an the any be been being to get ever even so at all".split())
NOTHING_SKIPS = frozenset("is are will be gets ever".split())   # not "to": "costs nothing to cancel"
# "not just books", "no longer", "don't have to give": no denial of the word that follows
NOT_A_DENIAL = frozenset("only just merely longer matter doubt problem worries worry have has need needs".split())


def absolutes_in(clause: Clause) -> dict[str, str]:
    """The absolute groups a clause uses, not denied ("it does not last forever"): group -> the words."""
    present = set(clause.stems)   # a term with a word the clause lacks cannot occur: most are skipped at once
    excluded = {i for term in NOT_ABSOLUTE if present.issuperset(term) for i in clause.find(term)}
    found = {}
    for name, terms in _GROUPS.items():
        for term in terms:
            if not present.issuperset(term):
                continue
            hits = [i for i in clause.find(term) if i not in excluded
                    and (name in EMPHASIS or term[0] in NEGATIONS or not clause.negated_at(i))
                    and not (name in DENIED_FROM_AFAR and _denied_from_afar(clause, i))
                    and not (term == ("every", "single") and i + 2 < len(clause.stems) and clause.stems[i + 2] in PERIODS)]
            if hits:
                found[name] = " ".join(term)
                break
    return found


def _denied_from_afar(clause: Clause, i: int) -> bool:
    return bool(set(clause.words[:i]) & NEGATIONS) or clause.words[i - 1:i] == ("any",)


# a share said in words, as a percentage ("about half goes to the clubs"; "nine tenths" of 89 percent is near enough:
# see SHARE_TOLERANCE)
SHARES = {"half": 50.0, "a third": 33.0, "one third": 33.0, "two thirds": 67.0, "a quarter": 25.0, "one quarter": 25.0,
          "three quarters": 75.0, "nine tenths": 90.0, "nine in ten": 90.0, "nine out of ten": 90.0}
_SHARES = {phrase(p): v for p, v in SHARES.items()}
SHARE_TOLERANCE = 3.0   # percentage points between a share in words and the fact's percentage


def shares_in(clause: Clause) -> list[float]:
    """The shares a clause states in words, as percentages ("half", "two thirds", "nine out of ten"), none where a
    longer phrase holds the word ("one and a half"), nor after a negation."""
    if set(clause.words) & NEGATIONS:
        return []
    found = {i: (len(term), v) for term, v in _SHARES.items() for i in clause.find(term)}
    covered = {j for i, (n, _) in found.items() for j in range(i + 1, i + n)}
    return [v for i, (n, v) in sorted(found.items()) if i not in covered and "and" not in clause.words[max(0, i - 2):i]]


def quantities_in(clause: Clause, units: frozenset[str] = UNITS) -> list[tuple[float, str]]:
    """The clause's quantities (lexicon.numbers_in, number words before one of `units`), with a duration named without
    a number ("a month", "a full year", "one whole week", "the first year") as one of it; none after a negation ("you
    don't have to give 10 euros")."""
    words = clause.words
    found = numbers_in(clause, units=units)
    for i, w in enumerate(words):
        if w not in ("a", "an", "one", "first") or not _leads_a_duration(words, i):
            continue
        j = i + 1 + (i + 1 < len(words) and words[i + 1] in FILLERS)
        if j < len(words) and stem(words[j]) in DURATIONS and (1.0, stem(words[j])) not in found:
            found.append((1.0, stem(words[j])))
    for i in range(len(words) - 2):   # "three or five euros": both in euros
        if _number(words[i]) and words[i + 1] in ("or", "to", "and") and _number(words[i + 2]):
            unit = next((u for v, u in found if v == _number(words[i + 2])), "")
            if unit and (_number(words[i]), unit) not in found:
                found.append((_number(words[i]), unit))
    return [] if set(words) & NEGATIONS else found


def values_in(clause: Clause) -> set[float]:
    """Every number the clause says, in digits or words, whatever follows it ("four fresh titles": 4)."""
    words, found, i = clause.words, set(), 0
    while i < len(words):
        if words[i].isdigit():
            found.add(float(words[i]))
        value, j = number_words_at(words, i)
        if j > i:
            found.add(value)
        i = max(j, i + 1)
    return found


def _leads_a_duration(words: Sequence[str], i: int) -> bool:
    """A word among the two before words[i] says how long ("lasts a year", "for the first year"), where "10 euros
    a month" and "one receipt a year" say how often."""
    return bool(set(words[max(0, i - 2):i]) & DURATION_LEADS)


def _number(word: str) -> float:
    return float(word) if word.isdigit() else float(NUMBER_WORDS.get(word, 0))


def periods_in(clause: Clause) -> set[str]:
    """How often the clause says something happens ("monthly", "every month", "once a year", "10 euros a month",
    "one receipt a year")."""
    words, stems = clause.words, clause.stems
    out = {PERIODIC[w] for w in words if w in PERIODIC}
    for i, w in enumerate(stems[1:], 1):
        before = words[i - 1]
        if w in PERIODS and (before in ("every", "each", "per") or before in ("a", "an") and i >= 2
                             and not _leads_a_duration(words, i - 1)):
            out.add(PERIODS[w])
    return out


def polarity_words(clause: Clause) -> tuple[frozenset[str], frozenset[str]]:
    """(asserted, denied): the clause's content-word stems outside any negation's reach, and those a scoped negation
    (SCOPED_NEGATIONS) denies."""
    denied, words = set(), clause.words
    for i, w in enumerate(words):
        if w not in SCOPED_NEGATIONS or (w == "no" and i + 1 < len(words) and not _content(words[i + 1])):
            continue   # "no" denies only the word right after it: "No, you can cancel" answers
        j, skips = i + 1, NOTHING_SKIPS if w == "nothing" else NEGATION_SKIPS
        while j < len(words) and j <= i + 3 and words[j] in skips:
            j += 1
        if j < len(words) and words[j] not in NOT_A_DENIAL and _content(words[j]):
            denied.add(stem(words[j]))
    # asserted: outside every negation's reach (the lexicon's wider window), so that neither side is read past its words
    asserted = {stem(w) for i, w in enumerate(words) if _content(w) and not clause.negated_at(i)} - denied
    return frozenset(asserted), frozenset(denied)


CONTRASTS = (("not",), ("instead", "of"), ("rather", "than"))
# "not any number I give you", "not all of it", "not only free", "not just clicks": emphasis or more, not a contrast
NOT_A_CONTRAST = frozenset("any all only just one single every even".split())
_UNIT_KEYS = frozenset(u[:5] for u in UNITS)   # units as word_keys cuts them


def contrasted_words(clause: Clause) -> frozenset[str]:
    """The word keys (word_keys) a contrast sets aside: what follows a clause that opens with "not" (the "not Y" of
    "X, not Y": "It starts today, not from when you activate it") or "instead of" / "rather than" anywhere. Numbers
    and units are the quantity checks' ("per click, not per day", "29 euros instead of 35 euros")."""
    words = clause.words
    opens = words[:1] == ("not",) and words[1:2] != () and words[1] not in NOT_A_CONTRAST and words[1:3] != ("a", "single")
    starts = [1] if opens else []
    starts += [i + len(c) for c in CONTRASTS[1:] for i in range(1, len(words)) if words[i:i + len(c)] == c]
    keys = frozenset().union(*(word_keys(" ".join(words[start:])) for start in starts))
    return frozenset(k for k in keys if not k.isdigit() and k not in _UNIT_KEYS)


def stated_words(clauses: Sequence[Clause]) -> frozenset[str]:
    """The word keys the clauses state outside every negation's reach and never within one, nor set aside by a
    contrast of their own ("instead of the standard price")."""
    outside, within = set(), set()
    for clause in clauses:
        for i, w in enumerate(clause.words):
            (within if clause.negated_at(i) else outside).update(word_keys(w))
        within |= contrasted_words(clause)
    return frozenset(outside - within)


def _content(word: str) -> bool:
    return bool(content_words(word)) and word not in NEGATIONS | SCOPED_NEGATIONS
