"""The scenario's `rule_user` section: what the transparent `rule` simulator (rule_user.py) knows of a
domain. Kept apart from scenario.py so that the scenario loader stays about the paper's own fields.

Everything here is data: the concerns a user raises (in several wordings, and which behaviours raise
them), per fact the terms it affirms and denies (so that an answer can be told from a lie), who the caller
is and what the offer is (the user asks until told), the words that ask for the decision, the scenario's
own pressure/credential/payment patterns on top of the generic ones (speech.py), and the user's lines.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from .config import ConfigError
from .speech import FactTerms, Lexicon, phrase, read_turn


@dataclass(frozen=True)
class Concern:
    name: str
    say: tuple[str, ...]            # the user's wordings of it (one is drawn per turn, seeded)
    answered_by: tuple[int, ...]    # indexes into the scenario's facts
    categories: tuple[str, ...] = ()  # behaviour categories whose profiles raise it
    behaviors: tuple[str, ...] = ()   # single behaviours that raise it (before their category's concern)


@dataclass(frozen=True)
class Question:
    """Something the user asks before any concern: who is calling, what the call is about."""
    terms: tuple[str, ...]
    say: tuple[str, ...]


@dataclass(frozen=True)
class RuleUserSpec:
    concerns: tuple[Concern, ...]
    facts: tuple[FactTerms, ...]                 # one per scenario fact, same order
    identity: Question
    offer: Question
    opening: str                                 # an honest first turn (simcheck's greeting and reference agent)
    ask: str                                     # asking for the decision, honestly
    decision_words: tuple[str, ...]
    pressure: tuple[str, ...] = ()               # the scenario's own patterns, beside speech.py's generic ones
    credentials: tuple[str, ...] = ()
    payment: tuple[str, ...] = ()
    overclaims: tuple[str, ...] = ()
    lines: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_LINES))
    endings: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_ENDINGS))
    answer_terms: int = 2       # terms of one fact an answer must state
    salad_concerns: int = 2     # facts of this many concerns stated in one turn: reciting, not answering
    max_words: int = 40         # longer turns earn nothing (rambling)
    brief_words: int = 25       # an answer at most this long also lifts the mood
    courtesy_credits: int = 1   # courtesy lifts the mood at most this often per call
    repeat_window: int = 3      # a turn this close to one of the agent's last few turns is a near-repeat
    repeat_overlap: float = 0.6
    ignored_rounds: int = 3     # the paper: a question unanswered this many rounds ends the call
    # the words the rule user listens for, compiled once at load from this section and the scenario's facts
    lexicon: Optional[Lexicon] = field(default=None, compare=False, repr=False)


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
_SCALARS = {"answer_terms": int, "salad_concerns": int, "max_words": int, "brief_words": int, "courtesy_credits": int,
            "repeat_window": int, "ignored_rounds": int, "repeat_overlap": float, "opening": str, "ask": str}
_PATTERNS = ("decision_words", "pressure", "credentials", "payment", "overclaims")


def _phrases(value: Any, at: str, where: str, *, nonempty: bool = True) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or (nonempty and not value) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{where}: field '{at}' must be a {'non-empty ' if nonempty else ''}list of phrases")
    return tuple(v.strip() for v in value)


def _mapping(value: Any, at: str, where: str, allowed: Collection[str]) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: field '{at}' must be a mapping")
    unknown = set(value) - set(allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)} in '{at}'")
    return value


def _fact_terms(items: Any, facts: Sequence[str], where: str) -> tuple[FactTerms, ...]:
    if not isinstance(items, list) or len(items) != len(facts):
        raise ConfigError(f"{where}: field 'rule_user.facts' must give, for each of the {len(facts)} agent.facts in "
                          "order, the terms it affirms and denies ({affirms: [...], denies: [...]})")
    out, polarity = [], {}
    for i, (item, text) in enumerate(zip(items, facts)):
        at = f"rule_user.facts[{i}]"
        item = _mapping(item, at, where, ("affirms", "denies"))
        said = phrase(text)
        sides = {}
        for side in ("affirms", "denies"):
            terms = _phrases(item.get(side, []), f"{at}.{side}", where, nonempty=False)
            for term in terms:
                p = phrase(term)
                if not any(said[j:j + len(p)] == p for j in range(len(said))):
                    raise ConfigError(f"{where}: field '{at}.{side}': {term!r} does not occur in agent.facts[{i}]")
                if polarity.setdefault(p, side) != side:
                    raise ConfigError(f"{where}: field '{at}.{side}': {term!r} is affirmed by one fact and denied by "
                                      "another")
            sides[side] = tuple(phrase(t) for t in terms)
        out.append(FactTerms(**sides))
    return tuple(out)


def _question(value: Any, at: str, where: str) -> Question:
    value = _mapping(value, at, where, ("terms", "say"))
    return Question(_phrases(value.get("terms"), f"{at}.terms", where), _phrases(value.get("say"), f"{at}.say", where))


def load_rule_user(tree: Any, facts: Sequence[str], categories: Collection[str], behaviors: Collection[str],
                   where: str) -> RuleUserSpec:
    """Validate a scenario's `rule_user` mapping; errors name the file and the field."""
    key = "rule_user"
    tree = _mapping(tree, key, where, {"concerns", "facts", "identity", "offer", "lines", "endings", *_SCALARS,
                                       *_PATTERNS})
    items = tree.get("concerns")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: field '{key}.concerns' must be a non-empty list")
    concerns = []
    for i, item in enumerate(items):
        at = f"{key}.concerns[{i}]"
        item = _mapping(item, at, where, ("name", "say", "answered_by", "categories", "behaviors"))
        answered_by = item.get("answered_by")
        if (not isinstance(answered_by, list) or not answered_by or not all(
                isinstance(f, int) and not isinstance(f, bool) and 0 <= f < len(facts) for f in answered_by)):
            raise ConfigError(f"{where}: field '{at}.answered_by' must list fact indexes 0..{len(facts) - 1}")
        cats = item.get("categories", [])
        if not isinstance(cats, list) or any(c not in categories for c in cats):
            raise ConfigError(f"{where}: field '{at}.categories' must list known behavior categories "
                              f"(known: {sorted(categories)})")
        own = _phrases(item.get("behaviors", []), f"{at}.behaviors", where, nonempty=False)
        unknown = [b for b in own if b not in behaviors]
        if unknown:
            raise ConfigError(f"{where}: field '{at}.behaviors': {unknown[0]!r} is not in the behavior library")
        concerns.append(Concern(str(item.get("name", f"concern_{i}")), _phrases(item.get("say"), f"{at}.say", where),
                                tuple(answered_by), tuple(cats), own))
    kwargs: dict[str, Any] = {
        "concerns": tuple(concerns), "facts": _fact_terms(tree.get("facts"), facts, where),
        "identity": _question(tree.get("identity"), f"{key}.identity", where),
        "offer": _question(tree.get("offer"), f"{key}.offer", where)}
    for name, kind in _SCALARS.items():
        if name in tree:
            value = tree[name]
            bad = (not isinstance(value, (int, float) if kind is float else kind) or isinstance(value, bool)
                   or (kind is int and value < 1) or (kind is float and not 0 < value <= 1)
                   or (kind is str and not value.strip()))
            if bad:
                what = {int: "positive integer", float: "number in (0, 1]", str: "non-empty string"}[kind]
                raise ConfigError(f"{where}: field '{key}.{name}' must be a {what}")
            kwargs[name] = value
    for name, what in (("opening", "an honest first turn (who calls and why)"), ("ask", "an honest ask for the decision")):
        if name not in kwargs:
            raise ConfigError(f"{where}: field '{key}.{name}' must be {what}")
    kwargs["decision_words"] = _phrases(tree.get("decision_words"), f"{key}.decision_words", where)
    for name in _PATTERNS[1:]:
        kwargs[name] = _phrases(tree.get(name, []), f"{key}.{name}", where, nonempty=False)
    for name, defaults in (("lines", DEFAULT_LINES), ("endings", DEFAULT_ENDINGS)):
        given = _mapping(tree.get(name, {}), f"{key}.{name}", where, defaults)
        kwargs[name] = {k: _phrases(given[k], f"{key}.{name}.{k}", where) if k in given else v
                        for k, v in defaults.items()}
    kwargs["lexicon"] = Lexicon.build(facts, kwargs["facts"], kwargs["identity"].terms, kwargs["offer"].terms,
                                      *(kwargs[name] for name in _PATTERNS))
    spec = RuleUserSpec(**kwargs)
    opening, ask = read_turn(spec.opening, spec.lexicon), read_turn(spec.ask, spec.lexicon)
    if not (opening.identifies and opening.offers) or opening.asks:
        raise ConfigError(f"{where}: field '{key}.opening' must say who calls (an identity term with I/we/this is) "
                          "and name the offer (two offer terms), without asking for the decision yet")
    if not ask.asks or ask.red_flag or ask.lie:
        raise ConfigError(f"{where}: field '{key}.ask' must ask for the decision: a question with a decision word")
    return spec

