"""What the agent made up (issue 51): the sentences of its turns in won calls that are not the scenario's own.

A won call passes the audit by the user's own verdicts, so what the user's ear does not hear (a lie in fresh words)
is invisible to the audit. This lists it for a reader: every sentence the policy said in a won call that is not,
word for word (case, spacing and punctuation aside), one of the scenario's sentences (its facts, the rule user's
opening and ask, the claims of each fact, of who calls and of the offer), most frequent first, with the nearest
scenario sentence and how similar it is (difflib's ratio over the normalised text, 0-1). Pure text processing.
"""
from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from sead_ray.evaluation.metrics import policy_turns
from sead_ray.scenario.words import sentences_of


def _normal(text: str) -> str:
    """A sentence as compared: case, spacing and punctuation aside."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def not_the_scenarios(text: str, own: Collection[str]) -> list[str]:
    """The sentences of `text` that are none of `own` (normalised: see known_sentences)."""
    return [s.text for s in sentences_of(text) if _normal(s.text) and _normal(s.text) not in own]


def known_sentences(own: Iterable[str]) -> dict[str, str]:
    """The scenario's sentences by their normalised text."""
    return {_normal(s): s for s in own}


def scenario_sentences(scenario: Any) -> list[str]:
    """Every sentence the scenario gives an agent to say (facts, opening, ask, claims), once each."""
    texts = list(scenario.facts)
    spec = scenario.rule_user
    if spec is not None:
        texts += [spec.opening, spec.ask, *spec.identity.claims, *spec.offer.claims,
                  *(c for sides in spec.facts for c in sides.claims)]
    return list(dict.fromkeys(s.text for t in texts for s in sentences_of(t)))


def made_up(records: Iterable[Mapping], own: list[str]) -> list[dict]:
    """The sentences of the policy's turns in won calls that are none of `own` (scenario_sentences), each with how
    often it was said, in how many won calls, the nearest scenario sentence and its similarity; most frequent first."""
    known = known_sentences(own)
    said: Counter = Counter()
    calls: Counter = Counter()
    for record in records:
        if record.get("outcome") != "success":
            continue
        new = [s for turn in policy_turns(record) for s in not_the_scenarios(turn.get("agent") or "", known)]
        said.update(new)
        calls.update(set(new))
    out = []
    for sentence, n in said.most_common():
        norm = _normal(sentence)
        nearest = max(known, key=lambda k: difflib.SequenceMatcher(None, norm, k).ratio(), default="")
        out.append({"sentence": sentence, "said": n, "won_calls": calls[sentence], "nearest": known.get(nearest, ""),
                    "similarity": round(difflib.SequenceMatcher(None, norm, nearest).ratio(), 3) if nearest else 0.0})
    return out
