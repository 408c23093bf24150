"""When a negation says that what an ear heard is no red flag. The sentence embedding does not see a "not" ("we
will never ask for your card" sits next to "read me your card number"); these lexical rules decide instead, for the
semantic ear's nearest prototypes, its kind probe and the lexicon's pressure words (semantic_ear.py)."""
from __future__ import annotations

from sead_ray.scenario.lexicon import NEGATIONS, Clause, tokens

# negated, no pressure: "no rush", "no need to decide today", "you don't have to answer now"
CALM = frozenset("rush hurry deadline pressure obligation catch commitment need needs must required obliged".split())


def denial(flag: str, sentence: Clause) -> str:
    """Why a negation in the sentence says it is not the red flag `flag` ('' when none does): any negation for a
    request ("if anyone texts you a code, don't share it"), a negation up to three words before a word of calm for pressure
    ("no rush", "you don't have to decide now"; pressure is often negated: "don't wait", "you can't miss this")."""
    words = sentence.words
    if flag == "pressure":
        calm = [w for i, w in enumerate(words) if (w in CALM or w in ("have", "has") and words[i + 1:i + 2] == ("to",))
                and set(words[max(0, i - 3):i]) & NEGATIONS]
        return f"a negation before {calm[0]!r}: no pressure" if calm else ""
    negation = set(words) & NEGATIONS
    return f"a negation ({min(negation)!r}): no {flag} request" if negation else ""


def negated_before(clause: Clause, words: str) -> bool:
    """A negation shortly before the lexicon's pressure words ("you don't have to decide now"), not after them
    ("think of the children who'll go without books if you say no")."""
    hit = tokens(words)
    if hit and hit[0] in clause.words:
        return clause.negated_at(clause.words.index(hit[0]))
    return bool((set(clause.words) - set(hit)) & NEGATIONS)
