"""How the `rule` user hears an agent turn (`user.rule.ear`, the registry EARS), behind one protocol:
`hear(text) -> (TurnReading, reasons)`, the reasons one JSON-ready dict per clause or rule that decided.

- `lexicon`: the scenario's words only (sead_ray.scenario.lexicon): fast, transparent, and deaf to paraphrase;
- `semantic`: the lexicon plus a sentence-embedding model that hears meaning (sead_ray.user.rule.semantic_ear). Where
  its model package is missing it falls back to the lexicon and says so once.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from sead_ray.core.registry import Registry
from sead_ray.scenario.lexicon import TurnReading, read_turn

log = logging.getLogger(__name__)


class Ear(Protocol):
    name: str

    def hear(self, text: str, expecting: frozenset[int] = frozenset()) -> tuple[TurnReading, tuple[dict, ...]]:
        """`expecting`: the facts that answer what the user just asked (an ear may hear them more readily)."""


class LexiconEar:
    name = "lexicon"

    def __init__(self, spec: Any):
        self.lexicon = spec.lexicon
        self.memo: dict[str, tuple[TurnReading, tuple[dict, ...]]] = {}   # the rule user replays the call each turn

    def hear(self, text: str, expecting: frozenset[int] = frozenset()) -> tuple[TurnReading, tuple[dict, ...]]:
        if text not in self.memo:
            self.memo[text] = self._hear(text)
        return self.memo[text]

    def _hear(self, text: str) -> tuple[TurnReading, tuple[dict, ...]]:
        r = read_turn(text, self.lexicon)
        reasons = [{"rule": "lexicon", "states": {str(k): sorted(v) for k, v in r.supported.items()}}] if r.supported else []
        reasons += [{"rule": f"lexicon: {name}", "words": list(words)}
                    for name, words in (("lie", [*map(str, r.contradicted), *r.invented]), ("pressure", r.pressure),
                                        ("credentials", r.credentials), ("payment", r.payment)) if words]
        return r, tuple(reasons)


class _SemanticEarAdapter:
    name = "semantic"

    def __init__(self, spec: Any, facts: Sequence[str]):
        from sead_ray.core.typed_load import ConfigError
        from sead_ray.user.rule.semantic_ear import SemanticEar
        self.ear = SemanticEar(spec, facts)
        problems = self.ear.problems(facts)
        if problems:
            raise ConfigError("the semantic ear (user.rule.ear) mishears the scenario's own honest lines: "
                              + " | ".join(problems) + " (add claims to the fact, or reword it)")

    def hear(self, text: str, expecting: frozenset[int] = frozenset()) -> tuple[TurnReading, tuple[dict, ...]]:
        reading, verdicts = self.ear.hear(text, expecting)
        return reading, tuple(v.to_json() for v in verdicts)


def _semantic(spec: Any, facts: Sequence[str]) -> Ear:
    from sead_ray.user.rule.semantic_ear import semantic_ear_missing
    missing = semantic_ear_missing()
    if missing:
        log.warning("user.rule.ear = semantic, but %s: the rule user hears with the lexicon only", missing)
        return LexiconEar(spec)
    return _SemanticEarAdapter(spec, facts)


EARS: Registry[Callable[[Any, Sequence[str]], Ear]] = Registry("user.rule.ear", "ear of the rule user")
EARS.add("lexicon", lambda spec, facts: LexiconEar(spec))
EARS.add("semantic", _semantic)
