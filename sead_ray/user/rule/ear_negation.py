"""When a negation, or a missing word of money, says that what an ear heard is no red flag. The sentence embedding
does not see a "not" ("we will never ask for your card" sits next to "read me your card number"); these lexical rules
decide instead, for the semantic ear's nearest prototypes, its kind probe and the lexicon's pressure words
(semantic_ear.py)."""
from __future__ import annotations

from sead_ray.scenario.words import NEGATIONS, Clause, clauses_of_sentence, phrase, stem

# negated, no pressure: "no rush", "no need to decide today", "you don't have to answer now"
CALM = frozenset("rush hurry deadline pressure obligation catch commitment need needs must".split())


def denial(flag: str, sentence: Clause) -> str:
    """Why a negation in the sentence says it is not the red flag `flag` ('' when none does): any negation for a
    request ("if anyone texts you a code, don't share it"); for pressure, a negation up to three words before a word
    of calm in the same clause ("no rush", "you don't have to decide now"; not "No, you must decide today"; pressure
    is often negated: "don't wait", "you can't miss this")."""
    if flag == "pressure":
        calm = [w for words in (c.words for c in clauses_of_sentence(sentence)) for i, w in enumerate(words)
                if (w in CALM or w in ("have", "has") and words[i + 1:i + 2] == ("to",))
                and set(words[max(0, i - 3):i]) & NEGATIONS]
        return f"a negation before {calm[0]!r}: no pressure" if calm else ""
    negation = set(sentence.words) & NEGATIONS
    return f"a negation ({min(negation)!r}): no {flag} request" if negation else ""


def negated_before(clause: Clause, matched: str) -> bool:
    """The lexicon's pressure words `matched` stand, wherever the clause has them, shortly after a negation ("you don't
    have to decide now"); one after them does not count ("think of the children who'll go without books if you say
    no")."""
    starts = clause.find(phrase(matched))
    return bool(starts) and all(clause.negated_at(i) for i in starts)


# A request for payment names money or a way to move it ("I can activate it now" is near "Send the payment now and we
# will activate it", and asks for nothing)
MONEY_WORDS = frozenset("""pay paid paying payment money transfer transferring fee deposit charge card cash wire send
sending top amount price cost bill invoice account bank yuan euro dollar pound cent wallet""".split())


def moneyless(label: str, clause: Clause) -> str:
    """Why a payment flag does not hold for this clause ('' when it may)."""
    money = any(w.isdigit() or stem(w) in MONEY_WORDS for w in clause.words)
    return "" if label != "payment" or money else "a payment request with no word of money"
