"""How the `rule` user hears an agent turn (`user.rule.ear`, the registry EARS), behind one protocol:
`hear(text, expecting) -> Hearing` (hearing.py: the facts the turn states, the rest of its reading, and why).

- `lexicon`: the scenario's words only (lexicon.py): fast, transparent, and deaf to paraphrase;
- `semantic`: the lexicon plus a sentence-embedding model that hears meaning (sead_ray.user.rule.semantic_ear). Where
  its model package is missing it falls back to the lexicon and says so once.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sead_ray.core.registry import Registry
from sead_ray.user.rule.hearing import Hearing, LexicalReason
from sead_ray.user.rule.lexicon import lexicon_of, read_turn

log = logging.getLogger(__name__)


class Ear(Protocol):
    name: str

    def hear(self, text: str, expecting: frozenset[int] = frozenset()) -> Hearing:
        """`expecting`: the facts that answer what the user just asked (an ear may hear them more readily)."""


class LexiconEar:
    """A fact is stated by `answer_terms` of its own terms with its polarity; reciting counts the terms beyond those
    of the scenario's pitch (saying the offer again, "a free 700-yuan credit", recites no fact)."""
    name = "lexicon"

    def __init__(self, spec: Any, facts: Sequence[str]):
        self.lexicon, self.answer_terms = lexicon_of(spec, facts), spec.answer_terms
        self.pitch = frozenset().union(*read_turn(spec.opening, self.lexicon).supported.values())
        self.memo: dict[str, Hearing] = {}   # the rule user replays the call each turn

    def hear(self, text: str, expecting: frozenset[int] = frozenset()) -> Hearing:
        if text not in self.memo:
            self.memo[text] = self._hear(text)
        return self.memo[text]

    def _hear(self, text: str) -> Hearing:
        r = read_turn(text, self.lexicon)
        reasons = [LexicalReason("lexicon", states=tuple((k, tuple(sorted(v))) for k, v in r.supported.items()))] \
            if r.supported else []
        reasons += [LexicalReason(f"lexicon: {name}", tuple(words))
                    for name, words in (("lie", [*map(str, r.contradicted), *r.invented]), ("pressure", r.pressure),
                                        ("credentials", r.credentials), ("payment", r.payment)) if words]
        return Hearing(r, stated=frozenset(k for k in r.supported if r.states(k, self.answer_terms)),
                       recited=frozenset(k for k in r.supported if r.states(k, self.answer_terms, self.pitch)),
                       hears_meaning=False, reasons=tuple(reasons))


def _semantic(spec: Any, facts: Sequence[str]) -> Ear:
    from sead_ray.user.rule.sentence_embedder import semantic_ear_missing
    missing = semantic_ear_missing()
    if missing:
        log.warning("user.rule.ear = semantic, but %s: the rule user hears with the lexicon only", missing)
        return LexiconEar(spec, facts)
    from sead_ray.core.typed_load import ConfigError
    from sead_ray.user.rule.semantic_ear import SemanticEar
    ear = SemanticEar(spec, facts)
    problems = ear.problems(facts)
    if problems:
        raise ConfigError("the semantic ear (user.rule.ear) mishears the scenario's own honest lines: "
                          + " | ".join(problems) + " (add claims to the fact, or reword it)")
    return ear


EARS: Registry[Callable[[Any, Sequence[str]], Ear]] = Registry("user.rule.ear", "ear of the rule user")
EARS.add("lexicon", LexiconEar)
EARS.add("semantic", _semantic)
