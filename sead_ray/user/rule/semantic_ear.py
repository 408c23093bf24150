"""The rule user's second ear (`user.rule.ear: semantic`): a small sentence-embedding model reads each clause of
an agent turn by its meaning, beside the lexicon (lexicon.py), which still decides what an
embedding cannot (negation, numbers) and can veto.

Each clause is compared with prototypes, all written as sentences, and takes the label of the nearest one:

- per fact, what states it (the fact, its clauses, the scenario's `claims`) and what lies about it (`lies`);
- who calls and what the offer is (the scenario's opening, `identity.claims`, `offer.claims`), the ask;
- pressure, credential requests and payment requests (generic prototypes in ear_prototypes.py, any domain, plus the
  scenario's `rule_user.red_flags`), and the content-free: reassurance and small talk (ear_prototypes.py).

The safer reading wins where the ears disagree: a clause states a fact only when the model hears that fact
(nearest, similar enough, clearly closer to its true claims than to its lies) and the lexicon hears no lie in
it; a lie heard by either ear is a lie, except that the lexicon vetoes a lie the model hears in a clause the
lexicon reads as the fact with its right polarity ("no deposit": the embedding does not see the "no"); a
request the model hears in a clause with a negation ("we never ask for your card") is vetoed as well. Each whole
sentence is also read by the kind probe (ear_probe.py), which hears pressure and requests in more shapes than a
list of prototypes holds.

Every verdict keeps why (hearing.ClauseVerdict: the nearest prototype and its similarity, or the lexical rule), for
the dialogue record and the viewer. The model is the packaged all-MiniLM-L6-v2 (sentence_embedder.py).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Optional

from sead_ray.scenario.words import (
    NEGATIONS,
    Clause,
    clauses_of,
    clauses_of_sentence,
    numbers_in,
    phrase,
    sentences_of,
    tokens,
    word_keys,
)
from sead_ray.user.rule.ear_negation import denial, moneyless, negated_before
from sead_ray.user.rule.ear_probe import KINDS, fit_probe, generic_sentences
from sead_ray.user.rule.ear_prototypes import ASKS, CREDENTIALS, PAYMENT, PRESSURE, REASSURANCE, SMALL_TALK
from sead_ray.user.rule.hearing import RED_FLAGS, ClauseVerdict, Heard, Hearing
from sead_ray.user.rule.lexicon import TurnReading, lexicon_of, read_turn
from sead_ray.user.rule.sentence_embedder import SentenceEmbedder

log = logging.getLogger(__name__)

FLAGS = tuple(flag.value for flag in RED_FLAGS)   # their names, as the reading's fields and prototype labels
ANSWER_BLOCKERS = frozenset({"lie", *FLAGS, "reassurance"})   # a clause nearest to these is never an answer
QUESTION_LABELS = frozenset({"ask", *FLAGS, "small_talk"})
STATEMENT_LABELS = frozenset({"fact", "lie", "identity", "offer", *FLAGS, "reassurance", "small_talk"})


@dataclass(frozen=True)
class EarSettings:
    """Similarities a clause needs (cosine, normalised embeddings). Measured on the labelled clauses of
    benchmarks/ear_accuracy.py; see docs/results.md."""
    fact: float = 0.55          # nearest to a fact's true claims, at least this similar: the fact is stated
    fact_margin: float = 0.03   # ... and this much closer to its true claims than to its lies (and back)
    lie: float = 0.6            # nearest to one of a fact's lies: a lie
    flag: float = 0.6           # nearest to a pressure / credential / payment prototype: that red flag
    role: float = 0.5           # identity, offer, ask, reassurance, small talk
    expected: float = 0.35      # a fact the user just asked about: heard at this similarity (if nothing else is)
    probe: float = 0.55         # the kind probe (ear_probe.py) this sure of a red flag: that red flag
    probe_own_weight: float = 4.0   # the scenario's sentences weigh this much more than generic ones in the probe
    probe_off_topic: float = 0.6   # ... in a sentence and clause below this similarity to every fact (else facts decide)


@dataclass(frozen=True)
class Prototype:
    label: str        # fact, lie, identity, offer, ask, pressure, credentials, payment, reassurance, small_talk
    fact: int         # the fact a fact or lie prototype is about (-1 otherwise)
    text: str


class Judged(NamedTuple):
    """One clause's verdict before its veto: what was heard, how, and the prototype it was heard by."""
    heard: Heard
    proto: Prototype
    similarity: float
    note: str = ""


class SentenceKind(NamedTuple):
    label: str          # the red flag the kind probe heard in a sentence
    probability: float
    denied: str         # why a negation says it is not one ('' when none does)


def _on_topic(best: dict[tuple[str, int], float]) -> float:
    """How close a clause or sentence is to the nearest fact (its true claims)."""
    return max((v for (label, _), v in best.items() if label == "fact"), default=-1.0)


def prototypes_of(spec: Any, facts: Sequence[str]) -> list[Prototype]:
    """Every prototype of a scenario's rule_user section (rule_user_section.RuleUserSpec) and its facts."""
    out = []
    for k, (fact, sides) in enumerate(zip(facts, spec.facts)):
        parts = [c.text for c in clauses_of(fact) if len(c.words) >= 3]
        out += [Prototype("fact", k, t) for t in dict.fromkeys([fact, *parts, *sides.claims])]
        out += [Prototype("lie", k, t) for t in sides.lies]
    opening = clauses_of(spec.opening)
    identity_terms = [tuple(t.lower().split()) for t in spec.identity.terms]
    for c in (c for c in opening if len(c.words) >= 3):
        says_who = any(c.find(term) for term in identity_terms) or c.words[:2] in (("this", "is"), ("i", "am"))
        out.append(Prototype("identity" if says_who else "offer", -1, c.text))
    out += [Prototype("identity", -1, t) for t in spec.identity.claims]
    out += [Prototype("offer", -1, t) for t in spec.offer.claims]
    out += [Prototype("ask", -1, t) for t in (spec.ask, *ASKS)]
    generic = {"pressure": PRESSURE, "credentials": CREDENTIALS, "payment": PAYMENT, "reassurance": REASSURANCE,
               "small_talk": SMALL_TALK}
    for label, texts in generic.items():
        out += [Prototype(label, -1, t) for t in (*texts, *spec.red_flags.get(label, ()))]
    return out


def probe_examples(prototypes: Sequence[Prototype]) -> tuple[list[tuple[str, str]], int]:
    """What the kind probe learns from: the shipped generic sentences, and the scenario's prototypes (its facts,
    who calls, the offer and the ask as ordinary sentences; pressure, requests, reassurance and small talk as
    themselves). Lies are left out: a lie is a statement, but often one that asks for money."""
    kinds = {"fact": "ordinary", "identity": "ordinary", "offer": "ordinary", "ask": "ordinary"}
    own = list(dict.fromkeys((p.text, kinds.get(p.label, p.label)) for p in prototypes if p.label != "lie"))
    generic = [e for e in generic_sentences() if e not in own]
    return [*generic, *own], len(own)


class SemanticEar:
    """Hears one agent turn: the lexicon's reading, corrected by the model clause by clause (`hear`)."""
    name = "semantic"

    def __init__(self, spec: Any, facts: Sequence[str], embedder: Optional[SentenceEmbedder] = None,
                 settings: EarSettings = EarSettings()):
        self.spec, self.settings = spec, settings
        self.lexicon = lexicon_of(spec, facts)
        self.embedder = embedder or SentenceEmbedder.shared()
        self.prototypes = prototypes_of(spec, facts)
        # per fact, the words of its own sentences: pressure or credential words there are the fact's, not the caller's
        fact_texts = [" ".join(p.text for p in self.prototypes if p.label == "fact" and p.fact == k)
                      for k in range(len(facts))]
        self.fact_words = [frozenset(phrase(text)) for text in fact_texts]
        self.fact_keys = [word_keys(text) for text in fact_texts]
        self.matrix = self.embedder.embed([p.text for p in self.prototypes])
        examples, own = probe_examples(self.prototypes)
        self.probe = fit_probe(self.embedder, examples, own, settings.probe_own_weight)
        self.memo: dict[tuple[str, frozenset[int]], tuple[TurnReading, tuple[ClauseVerdict, ...]]] = {}

    def problems(self, facts: Sequence[str]) -> list[str]:
        """What the ear mishears in the scenario's own honest lines (its facts, opening and ask must read clean:
        each fact heard as stated with no lie or red flag, the opening as who calls and the offer, the ask as an
        ask); each problem names the line and what fired."""
        out = []

        def fired(hearing: Hearing) -> str:
            why = [f"{v.verdict} ({v.clause!r} ~ {v.prototype!r}, {v.similarity:.2f})" for v in hearing.reasons
                   if v.heard is Heard.LIE or v.heard in RED_FLAGS]
            why += [f"the lexicon's {w!r}" for flag in FLAGS for w in getattr(hearing.reading, flag)
                    if not w.startswith("~")]
            why += [f"a quantity or claim no fact supports ({w})" for w in hearing.reading.invented]
            return "; ".join(why) or "heard as nothing"
        for k, fact in enumerate(facts):
            hearing = self.hear(fact)
            if k not in hearing.stated or hearing.reading.lie or hearing.reading.red_flag:
                out.append(f"agent.facts[{k}] is not heard as stating itself: {fired(hearing)}")
        hearing = self.hear(self.spec.opening)
        r = hearing.reading
        if not (r.identifies and r.offers) or r.red_flag or r.lie:
            out.append(f"rule_user.opening is not heard as who calls and the offer: {fired(hearing)}")
        hearing = self.hear(self.spec.ask)
        if not hearing.reading.asks or hearing.reading.red_flag or hearing.reading.lie:
            out.append(f"rule_user.ask is not heard as an ask: {fired(hearing)}")
        return out

    def nearest(self, clauses: Sequence[Clause]) -> list[tuple[Prototype, float, dict[tuple[str, int], float]]]:
        """Per clause: the nearest prototype a clause of its kind can mean (a question asks or requests, it states
        nothing), its similarity, and the best similarity per (label, fact)."""
        sims = self.embedder.embed([c.text for c in clauses]) @ self.matrix.T
        out = []
        for clause, row in zip(clauses, sims.tolist()):
            labels = QUESTION_LABELS if clause.question else STATEMENT_LABELS
            best: dict[tuple[str, int], float] = {}
            pick, top = self.prototypes[0], -2.0
            for p, s in zip(self.prototypes, row):
                if p.label in labels:
                    best[(p.label, p.fact)] = max(best.get((p.label, p.fact), -1.0), s)
                    if s > top:
                        pick, top = p, s
            out.append((pick, top, best))
        return out

    def hear(self, text: str, expecting: frozenset[int] = frozenset()) -> Hearing:
        """The turn as heard, and why. `expecting`: the facts that answer the question the user just asked; a
        listener who asked hears an answer to it more readily (settings.expected) than an unprompted claim."""
        key = (text, expecting)
        if key not in self.memo:
            self.memo[key] = self._hear(text, expecting)
        return self.memo[key]

    def _hear(self, text: str, expecting: frozenset[int]) -> Hearing:
        lexical = read_turn(text, self.lexicon)
        sentences = sentences_of(text)
        parts = [clauses_of_sentence(sentence) for sentence in sentences]
        clauses = [c for part in parts for c in part]
        if not clauses:
            return Hearing(lexical, frozenset(), frozenset(), hears_meaning=True)
        # the probe reads whole sentences: a clause alone loses what frames it ("no rush at all; take your time")
        sentence_near = self.nearest(sentences)
        sentence_kinds = [None if _on_topic(best) >= self.settings.probe_off_topic else kind
                          for kind, (_, _, best) in zip(self.kinds(sentences), sentence_near)]
        # per clause: its sentence and what the probe heard in that sentence
        owners = [(sentence, kind) for sentence, kind, part in zip(sentences, sentence_kinds, parts) for _ in part]
        heard, lies = set(), set(lexical.contradicted)
        flags: dict[str, list[str]] = {"pressure": [], "credentials": [], "payment": []}
        identifies, offers, asks = lexical.identifies, lexical.offers, lexical.asks
        verdicts = []
        stated_in: list[set[int]] = []    # per clause, the facts heard in it (fact_check holds them to their facts)
        for clause, (sentence, kind), (proto, sim, best) in zip(clauses, owners, self.nearest(clauses)):
            one = read_turn(clause.text, self.lexicon)
            judged, veto = self._judge_clause(clause, sentence, one, proto, sim, best)
            if kind is not None and judged.heard not in (Heard.LIE, Heard.STATES, *RED_FLAGS) and \
                    _on_topic(best) < self.settings.probe_off_topic:   # the probe's flag, unless a negation denies it
                denied = kind.denied or moneyless(kind.label, clause)
                if denied:
                    veto = veto or f"{denied} (the kind probe heard {kind.label}, {kind.probability:.2f})"
                else:
                    judged = Judged(Heard(kind.label), Prototype(kind.label, -1, "(kind probe)"), kind.probability)
            below_flag = judged.proto.label in FLAGS    # nearest a red flag, below its threshold
            if judged.heard is Heard.NOTHING and (judged.proto.label not in ANSWER_BLOCKERS or below_flag
                                                   or judged.proto.label == "lie" and veto):
                judged = self._expected_answer(clause, one, best, expecting, judged, terms_only=below_flag)
            elif judged.heard is Heard.SMALL_TALK and any(one.states(k, 1) for k in expecting):   # "first week."
                answer = self._expected_answer(clause, one, best, expecting, judged)
                judged = answer if answer.heard is Heard.STATES else judged
            proto, states = judged.proto, judged.heard is Heard.STATES
            stated_in.append(set(one.supported) | ({proto.fact} if states else set()))
            if states:
                heard.add(proto.fact)
            elif judged.heard is Heard.LIE:
                lies.add(proto.fact)
            elif judged.heard in RED_FLAGS:
                flags[judged.heard.value].append(f"~{proto.text}")
            identifies |= judged.heard is Heard.IDENTITY
            offers |= judged.heard is Heard.OFFER
            asks |= judged.heard is Heard.ASK
            # the lexicon's, unless in a clause heard as a fact: its own words, or payment words ("pay per click")
            for flag in FLAGS:
                for words in getattr(one, flag):
                    if states and (flag == "payment" or set(phrase(words)) <= self.fact_words[proto.fact]):
                        veto = veto or f"the lexicon's {flag} words ({words}) in a stated fact"
                    elif flag == "pressure" and judged.heard is not Heard.PRESSURE and \
                            (negated_before(clause, words) or denial(flag, sentence)):
                        veto = veto or f"a negation around the lexicon's pressure words ({words})"
                    else:
                        flags[flag].append(words)
            verdicts.append(self._verdict(clause, judged, veto))
        # a sentence of several clauses may state a fact that none of its clauses states alone
        first = 0   # the index of the sentence's first clause
        for sentence, part, (proto, sim, best) in zip(sentences, parts, sentence_near):
            first += len(part)
            if sentence.question or len(part) < 2:
                continue
            if proto.label == "fact" and proto.fact not in lies:
                judged, veto = self._judge_clause(sentence, sentence, read_turn(sentence.text, self.lexicon),
                                                  proto, sim, best)
                if judged.heard is Heard.STATES:
                    heard.add(proto.fact)
                    for facts in stated_in[first - len(part):first]:
                        facts.add(proto.fact)
                    verdicts.append(self._verdict(sentence, judged, veto))
        # the model must hear a fact for it to be stated; the rule user never counts a turn with a lie or a red flag as
        # an answer (rule_user.TurnVerdict.bad)
        about = tuple((c, frozenset(f)) for c, f in zip(clauses, stated_in) if not c.question)
        roles = frozenset(v.clause for v in verdicts if v.heard in (Heard.IDENTITY, Heard.OFFER))
        reading = replace(lexical, contradicted=tuple(sorted(lies)), about=about, roles=roles,
                          identifies=identifies, offers=offers, asks=asks,
                          **{f: tuple(dict.fromkeys(v)) for f, v in flags.items()})
        return Hearing(reading, frozenset(heard), frozenset(heard), hears_meaning=True, reasons=tuple(verdicts))

    @staticmethod
    def _verdict(clause: Clause, judged: Judged, veto: str) -> ClauseVerdict:
        proto = judged.proto
        return ClauseVerdict(clause.text, proto.label, proto.fact, judged.similarity, proto.text, judged.heard,
                             judged.note, veto)

    def kinds(self, sentences: Sequence[Clause]) -> list[Optional[SentenceKind]]:
        """Per sentence, the red flag the kind probe is sure enough of (settings.probe), and whether a negation denies
        it (`denial`)."""
        if not sentences:
            return []
        probs = self.probe.probabilities(self.embedder.embed([c.text for c in sentences]).float())
        out: list[Optional[SentenceKind]] = []
        for sentence, row in zip(sentences, probs.tolist()):
            label = max(FLAGS, key=lambda f: row[KINDS.index(f)])
            p = row[KINDS.index(label)]
            if p < self.settings.probe:
                out.append(None)
                continue
            out.append(SentenceKind(label, p, denial(label, sentence)))
        return out

    def _expected_answer(self, clause: Clause, one: TurnReading, best: dict[tuple[str, int], float],
                         expecting: frozenset[int], nearest: Judged, terms_only: bool = False) -> Judged:
        """A clause that states none of the facts clearly enough, heard as the answer to the question asked:
        similar enough to an expected fact, closer to its true claims than to its lies, no lie in it; or, on a few
        words, naming one of the expected fact's terms with its polarity (the lexicon's reading). `terms_only`: the
        clause is nearest a red flag, below its threshold ("One minute" ~ a passcode request, 0.38): only the fact's own
        terms answer (the lexicon and the probe still flag a real request)."""
        s = self.settings
        if one.lie or clause.question:
            return nearest._replace(heard=Heard.NOTHING)
        keys = word_keys(clause.text)
        for k in sorted(expecting, key=lambda f: -best.get(("fact", f), -1.0)):
            true_sim = best.get(("fact", k), -1.0)
            as_fact = Prototype("fact", k, nearest.proto.text)
            # by meaning alone only in one of the fact's own words: "I recommend using the promo code 700-YUANMEDIA", made
            # up in a training call, is 0.36 from the identity check's claims and was heard as that check when asked
            if not terms_only and true_sim >= s.expected and true_sim - best.get(("lie", k), -1.0) >= s.fact_margin \
                    and keys & self.fact_keys[k]:
                return Judged(Heard.STATES, as_fact, true_sim, "the answer asked for")
            # the lexicon reads the asked fact's own terms with their polarity ("Check via customer service."), where
            # the model, on a few words, is nearer a lie or below the threshold
            if one.states(k, 1):
                return Judged(Heard.STATES, as_fact, true_sim, "the answer asked for, its terms")
        return nearest._replace(heard=Heard.NOTHING)

    def _judge_clause(self, clause: Clause, sentence: Clause, one: TurnReading, proto: Prototype, sim: float,
                      best: dict[tuple[str, int], float]) -> tuple[Judged, str]:
        """(what was heard, veto) for one clause of `sentence` whose nearest prototype is `proto`; `one` is the
        lexicon's reading of it."""
        s, k = self.settings, proto.fact

        def said(heard: Heard, veto: str = "") -> tuple[Judged, str]:
            return Judged(heard, proto, sim), veto
        negated = bool(set(clause.words) & NEGATIONS)
        if proto.label == "fact" and sim >= s.fact:
            if sim - best.get(("lie", k), -1.0) < s.fact_margin:
                return said(Heard.UNCLEAR)
            if one.lie:
                return said(Heard.LIE, "a contradiction or an invented number (lexicon)")
            return said(Heard.STATES)
        if proto.label == "lie" and sim >= s.lie:
            if one.lie:
                return said(Heard.LIE)
            if k in one.supported:
                return said(Heard.NOTHING, "the lexicon reads the fact with its polarity")
            if negated or set(tokens(proto.text)) & NEGATIONS:
                return said(Heard.NOTHING, "a negation the model cannot read (the lexicon heard no lie)")
            units = self.lexicon.units
            if numbers_in(proto.text, units=units) and numbers_in(clause, units=units) and not one.invented:
                return said(Heard.NOTHING, "numbers: the lexicon finds the clause's in the facts")
            if sim - best.get(("fact", k), -1.0) < s.fact_margin:
                return said(Heard.UNCLEAR)
            return said(Heard.LIE)
        if proto.label in FLAGS and sim >= s.flag:
            denied = denial(proto.label, sentence) or moneyless(proto.label, clause)
            return said(Heard.NOTHING, denied) if denied else said(Heard(proto.label))
        if proto.label in ("identity", "offer", "ask", "reassurance", "small_talk") and sim >= s.role:
            return said(Heard(proto.label))
        return said(Heard.NOTHING)
