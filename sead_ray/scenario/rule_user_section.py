"""The scenario's `rule_user` section: what the transparent `rule` simulator (rule_user.py) knows of a
domain. Kept apart from scenario.py so that the scenario loader stays about the paper's own fields.

Everything here is data: the concerns a user raises (in several wordings, and which behaviours raise
them), per fact the terms it affirms and denies (so that an answer can be told from a lie), who the caller
is and what the offer is (the user asks until told), the words that ask for the decision, the scenario's
own pressure/credential/payment patterns on top of the generic ones, and the user's lines. How the rule user hears
a turn with these words is its own (sead_ray.user.rule.lexicon); here, only what the file says is checked.
"""
from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sead_ray.core.typed_load import ConfigError, option
from sead_ray.scenario.words import phrase

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Concern:
    say: tuple[str, ...] = option(nonempty=True, one_or_many=True)   # the user's wordings (one drawn per turn, seeded)
    answered_by: tuple[int, ...] = option(nonempty=True)              # indexes into the scenario's facts
    name: str = ""
    categories: tuple[str, ...] = ()  # behaviour categories whose profiles raise it
    behaviors: tuple[str, ...] = option((), one_or_many=True)   # single behaviours that raise it (before their category's)


@dataclass(frozen=True)
class Question:
    """Something the user asks before any concern: who is calling, what the call is about."""
    terms: tuple[str, ...] = option(nonempty=True, one_or_many=True)
    say: tuple[str, ...] = option(nonempty=True, one_or_many=True)
    claims: tuple[str, ...] = option((), one_or_many=True)   # other ways of telling it (the semantic ear's prototypes)


@dataclass(frozen=True)
class FactSides:
    """The terms one scenario fact affirms and denies, as the file writes them (the rule user's lexicon stems them)."""
    affirms: tuple[str, ...] = option((), one_or_many=True)
    denies: tuple[str, ...] = option((), one_or_many=True)
    claims: tuple[str, ...] = option((), one_or_many=True)   # the fact in other words (the semantic ear hears them)
    lies: tuple[str, ...] = option((), one_or_many=True)     # typical lies about it, in sentences


def _phrases(default: tuple[str, ...] = ()) -> Any:
    return option(default, one_or_many=True)


@dataclass(frozen=True)
class RuleUserSpec:
    concerns: tuple[Concern, ...] = option(nonempty=True)
    facts: tuple[FactSides, ...] = option()       # one per scenario fact, same order
    identity: Question = option()
    offer: Question = option()
    opening: str = option(nonempty=True)          # an honest first turn (simcheck's greeting and reference agent)
    ask: str = option(nonempty=True)              # asking for the decision, honestly
    decision_words: tuple[str, ...] = option(nonempty=True, one_or_many=True)
    pressure: tuple[str, ...] = _phrases()        # the scenario's own patterns, beside the rule user's generic ones
    credentials: tuple[str, ...] = _phrases()
    payment: tuple[str, ...] = _phrases()
    overclaims: tuple[str, ...] = _phrases()
    # the domain's countable things, singular: a number word before one is a claimed quantity ("ten books"), beside
    # the generic units of time, shares and money (lexicon.UNITS)
    units: tuple[str, ...] = _phrases()
    # the user's peers, plural ("restaurants", "donors"): "other restaurants have already signed" is pressure
    peers: tuple[str, ...] = _phrases()
    # the semantic ear's own examples, in sentences, beside its generic ones: pressure, credentials, payment,
    # reassurance, small_talk
    red_flags: dict[str, tuple[str, ...]] = option({}, one_or_many=True)
    lines: dict[str, tuple[str, ...]] = option({}, one_or_many=True)     # over DEFAULT_LINES
    endings: dict[str, tuple[str, ...]] = option({}, one_or_many=True)   # over DEFAULT_ENDINGS
    answer_terms: int = option(2, 1)       # terms of one fact an answer must state
    salad_concerns: int = option(2, 1)     # facts of this many concerns stated in one turn: reciting, not answering
    max_words: int = option(40, 1)         # longer turns earn nothing (rambling)
    brief_words: int = option(25, 1)       # an answer at most this long also lifts the mood
    courtesy_credits: int = option(1, 1)   # courtesy lifts the mood at most this often per call
    repeat_window: int = option(3, 1)      # a turn this close to one of the agent's last few turns is a near-repeat
    repeat_overlap: float = option(0.6, 0.05, 1.0)
    ignored_rounds: int = option(3, 1)     # the paper: a question unanswered this many rounds ends the call


RED_FLAG_KINDS = ("pressure", "credentials", "payment", "reassurance", "small_talk")
DEFAULT_LINES = {
    "ready": ("Alright, that sounds fair. So what happens now?",),
    "hesitant": ("Hmm. I'm still not sure about this.",),
    "objection": ("Hold on, that's not what I asked.",),
    "impatient": ("I have asked you this already.",),
}
DEFAULT_ENDINGS = {
    "accept": ("Alright, go ahead.",), "refuse": ("No, I'm not interested. Goodbye.",),
    "hangup": ("I don't have time for this. (hangs up)",),
}


def load_rule_user(spec: RuleUserSpec, facts: Sequence[str], categories: Collection[str], behaviors: Collection[str],
                   where: str) -> RuleUserSpec:
    """The checks of a scenario's `rule_user` section (loaded by typed_load) against the rest of the file; errors name
    the file and the field. (How the rule user hears its opening and ask is checked where it hears them:
    sead_ray.user.rule.lexicon.check_hearing.)"""
    key = "rule_user"
    concerns = []
    for i, concern in enumerate(spec.concerns):
        at = f"{key}.concerns[{i}]"
        if not all(0 <= f < len(facts) for f in concern.answered_by):
            raise ConfigError(f"{where}: {at}.answered_by must list fact indexes 0..{len(facts) - 1}")
        if any(c not in categories for c in concern.categories):
            raise ConfigError(f"{where}: {at}.categories must list known behavior categories (known: {sorted(categories)})")
        unknown = [b for b in concern.behaviors if b not in behaviors]
        if unknown:
            raise ConfigError(f"{where}: {at}.behaviors: {unknown[0]!r} is not in the behavior library")
        concerns.append(replace(concern, name=concern.name or f"concern_{i}"))
    lines = {}
    for name, defaults in (("lines", DEFAULT_LINES), ("endings", DEFAULT_ENDINGS)):
        given = getattr(spec, name)
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise ConfigError(f"{where}: {key}.{name}.{unknown[0]}: not a line of the rule user (known: {sorted(defaults)})")
        lines[name] = {**defaults, **given}
    sentences = [(f"{key}.facts[{i}].{side}", t) for i, f in enumerate(spec.facts) for side in ("claims", "lies")
                 for t in getattr(f, side)]
    sentences += [(f"{key}.{q}.claims", t) for q in ("identity", "offer") for t in getattr(spec, q).claims]
    sentences += [(f"{key}.red_flags.{kind}", t) for kind, texts in spec.red_flags.items() for t in texts]
    for at, text in sentences:   # a sentence in a [flow, list] cut at its comma reads as two halves
        if not text.rstrip().endswith((".", "!", "?")):
            raise ConfigError(f"{where}: {at}: {text!r} is not a whole sentence (it must end with . ! or ?); a "
                              "sentence with a comma inside a [...] list must be quoted")
    unknown = sorted(set(spec.red_flags) - set(RED_FLAG_KINDS))
    if unknown:
        raise ConfigError(f"{where}: {key}.red_flags.{unknown[0]}: not a kind the semantic ear hears (known: "
                          f"{', '.join(RED_FLAG_KINDS)})")
    _check_fact_terms(spec.facts, facts, where)
    spec = replace(spec, concerns=tuple(concerns), **lines)
    for problem in unchecked_facts(spec):
        log.warning("%s: %s", where, problem)
    return spec


def unchecked_facts(spec: RuleUserSpec) -> list[str]:
    """What the rule user cannot check in this section: facts with no `claims` (the semantic ear hears them only in
    the fact's own words) or no `lies` (a lie about them in fresh words has nothing to be told apart from)."""
    out = []
    for side, meaning in (("claims", "an honest answer in other words is heard only near the fact's own words"),
                          ("lies", "a lie about them in fresh words has nothing to be compared with")):
        missing = [i for i, f in enumerate(spec.facts) if not getattr(f, side)]
        if missing:
            out.append(f"rule_user.facts{missing} have no {side}: {meaning} (write three to five per fact; see "
                       "docs/architecture.md, \"the scenario file\")")
    return out


def _check_fact_terms(sides: Sequence[FactSides], facts: Sequence[str], where: str) -> None:
    """Each fact's terms occur in its fact's text (stemmed, as the rule user matches them), with one polarity."""
    if len(sides) != len(facts):
        raise ConfigError(f"{where}: rule_user.facts must give, for each of the {len(facts)} agent.facts in "
                          "order, the terms it affirms and denies ({affirms: [...], denies: [...]})")
    polarity = {}
    for i, (item, text) in enumerate(zip(sides, facts)):
        said = phrase(text)
        for side in ("affirms", "denies"):
            for term in getattr(item, side):
                p = phrase(term)
                if not any(said[j:j + len(p)] == p for j in range(len(said))):
                    raise ConfigError(f"{where}: rule_user.facts[{i}].{side}: {term!r} does not occur in agent.facts[{i}]")
                if polarity.setdefault(p, side) != side:
                    raise ConfigError(f"{where}: rule_user.facts[{i}].{side}: {term!r} is affirmed by one fact and "
                                      "denied by another")
