"""The `rule` user simulator: a transparent user with no model, driven by the scenario, that only honest
service moves.

It is the embedded demo's simulator (a 135M model cannot role-play a fair user, see README) and the
fast simulator of tests. Everything it knows comes from the scenario's `rule_user` section (rule_user_section.py);
how it hears a turn is lexicon.py. A call goes as the paper's user plays it:

1. The user picks up; after the caller's first words it asks who is calling until told (a statement with
   "I"/"this is" and an identity term), then what the call is about until the offer is named.
2. It voices its own concerns (those its behaviours raise), one at a time, each in one of several
   wordings. A turn answers the voiced question only by *stating* a fact that answers it (at least
   `answer_terms` of the fact's terms, with the fact's polarity: "no deposit"). Stating facts of other
   concerns is not an answer (pre-empting earns nothing; facts of `salad_concerns` concerns at once are
   recitation), nor is echoing the user's own words (a question asserts nothing; a turn made only of the
   user's words is parroting).
3. Once its own concerns are resolved it waits to be asked if its state passes the scenario's accept
   guard, or raises the scenario's other concerns while it does not ("lingering doubts").

Per turn (each dimension moves at most one level, the paper's rule):
  answers the voiced question                  concern: cooperation +1, trust +1; identity: trust +1;
                                               emotion +1 when brief (at most `brief_words`)
  leaves a voiced question unanswered          trust -1, emotion -1, cooperation -1 (evasion: the user
                                               disengages; a late answer no longer lifts the mood)
  a lie (contradicts a fact, a number or claim no fact supports)      trust -1, never an answer
  a statement about a fact that says more than the fact (fact_check.py: an absolute, a duration, an amount or a
  date the fact's own sentences never state; a welcome lie in place of the asked fact)   never an answer (the
                                               question stays open, as when left unanswered; no lie's cost
                                               unless the ear hears one)
  pressure (deadlines, now-or-never, threats, guilt)                 emotion -1, cooperation -1
  asking for credentials or payment                                   trust -1, emotion -1
  rambling (> `max_words`), a near-repeat of a recent turn (unless it answers the question voiced now: a person
  takes a right answer when it comes), parroting, recitation, nothing said    emotion -1, never an answer
  asking for the decision before it is persuaded      cooperation -1 ("being rushed"; refuses if its
                                               refuse guard then holds)
  courtesy, at most `courtesy_credits` times per call   emotion +1
Endings: accept when asked for the decision after its concerns are resolved and its state passes the
accept guard; a question left unanswered `ignored_rounds` rounds ends the call (hang-up, or refusal, as
the guards allow); refuse after `patience` turns without progress. An ending its guard does not allow
is not taken: the user stays on the line, impatient, and never says goodbye without ending the call.

The simulator is stateless: each turn it replays the call from the profile's initial state, so retries,
replays and any actor of the pool give the same answer. `accept_phrase` (planted preference, tests only):
accept exactly when the agent's words contain it.
"""
from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Optional

from sead_ray.scenario.rule_user_section import RuleUserSpec
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.turn_protocol import CONCERN, Agenda, UserRequest, UserTurnOutput
from sead_ray.scenario.words import content_words
from sead_ray.user.rule.fact_check import scenario_bounds, unsupported
from sead_ray.user.rule.hearing import Hearing
from sead_ray.user.rule.lexicon import TurnReading, check_hearing, lexicon_of

IDENTITY, OFFER, DECISION = "identity", "offer", "decision"


@dataclass(frozen=True)
class TurnVerdict:
    """What the rule user made of one agent turn."""
    answered: bool = False       # answered the question the user had voiced
    ignored: bool = False        # the user had voiced a question and the turn left it unanswered
    lie: bool = False
    pressure: bool = False
    credentials: bool = False
    payment: bool = False
    recital: bool = False        # facts of several concerns at once
    too_long: bool = False
    empty: bool = False
    repeat: bool = False
    parrot: bool = False
    early_ask: bool = False
    asked: bool = False
    courtesy: bool = False
    unsupported: bool = False    # says more about a fact than the fact (fact_check.unsupported)

    @property
    def bad(self) -> bool:
        """A turn that earns nothing, whatever else it says."""
        return (self.lie or self.pressure or self.credentials or self.payment or self.recital or self.too_long
                or self.empty or self.repeat or self.parrot or self.unsupported)


@dataclass
class _Call:
    state: list[int]
    own: list[int]                         # the profile's concerns, in the order it raises them
    others: list[int]                      # the scenario's other concerns, as lingering doubts
    identified: bool = False
    offered: bool = False
    resolved: set[int] = field(default_factory=set)
    voiced: Optional[tuple[str, int]] = None   # the question the user asked last (None: none yet, or none open)
    judged_against: Optional[tuple[str, int]] = None   # the question the last turn was graded against
    ignored: int = 0                       # rounds the voiced question went unanswered
    courtesy_used: int = 0
    status: str = "continue"
    verdict: TurnVerdict = TurnVerdict()
    heard: tuple[dict, ...] = ()           # the ear's reasons for the last turn's reading
    spoken: list[frozenset] = field(default_factory=list)   # content words of the agent's turns so far


def pick(options: Sequence[str], *salt: object) -> str:
    """A seeded choice among wordings (stable across processes, unlike hash())."""
    return options[zlib.crc32(repr(salt).encode()) % len(options)]


class RuleUserSimulator:
    def __init__(self, scenario: Scenario, accept_phrase: str = "", patience: int = 6, ear: str = "lexicon"):
        if scenario.rule_user is None:
            raise ValueError(f"scenario {scenario.name!r} ({scenario.source}) has no 'rule_user' section: the rule "
                             "simulator needs one (see configs/scenarios/restaurant_promotion.yaml)")
        self.scenario = scenario
        self.spec: RuleUserSpec = scenario.rule_user
        self.accept_phrase = accept_phrase
        self.patience = patience
        names = scenario.schema.names
        self._idx = {n: names.index(n) for n in ("cooperation", "emotion", "trust") if n in names}
        if len(self._idx) != 3:
            raise ValueError("the rule simulator needs state dimensions cooperation, emotion and trust")
        self.lexicon = lexicon_of(self.spec, scenario.facts)
        check_hearing(self.spec, scenario.facts, str(scenario.source))
        from sead_ray.user.rule.ears import EARS  # (the semantic ear loads its model only when chosen)
        self.ear = EARS.get(ear)(self.spec, scenario.facts)
        self.bounds = scenario_bounds(scenario)
        self._category = {b.text: b.category for b in scenario.behaviors}

    # -- who the user is ---------------------------------------------------------------------------
    def concern_order(self, behaviors: Sequence[str]) -> list[int]:
        """The concerns the profile's behaviours raise (a behaviour named by a concern first, else its category's
        concern), in an order drawn from the profile, so that no fixed script meets them in order. A profile
        that raises none still has one doubt (drawn the same way)."""
        own: list[int] = []
        concerns = self.spec.concerns
        for text in sorted(behaviors, key=lambda b: zlib.crc32(f"{b}|{sorted(behaviors)}".encode())):
            match = [i for i, c in enumerate(concerns) if text in c.behaviors] or \
                    [i for i, c in enumerate(concerns) if self._category.get(text) in c.categories]
            if match and match[0] not in own:
                own.append(match[0])
        return own or [zlib.crc32(repr(sorted(behaviors)).encode()) % len(concerns)]

    def accept_guard_holds(self, state: Sequence[int]) -> bool:
        return self._guard("accept", state)

    def _guard(self, status: str, state: Sequence[int]) -> bool:
        guard = self.scenario.status_guards.get(status)
        return guard is None or guard.allows(self.scenario.schema, tuple(state))

    def _agenda_done(self, call: _Call) -> bool:
        return call.identified and call.offered and all(k in call.resolved for k in call.own)

    def next_question(self, call: _Call) -> Optional[tuple[str, int]]:
        """What the user asks now: who, what, its own concerns; then, persuaded, the decision if its state is
        ready, else the scenario's other concerns; None once nothing is left to ask."""
        if not call.identified:
            return (IDENTITY, -1)
        if not call.offered:
            return (OFFER, -1)
        for k in call.own:
            if k not in call.resolved:
                return ("concern", k)
        if self.accept_guard_holds(call.state):
            return (DECISION, -1)
        for k in call.others:
            if k not in call.resolved:
                return ("concern", k)
        return None

    # -- one agent turn --------------------------------------------------------------------------
    def judge(self, said: str, call: _Call, user_line: str) -> tuple[TurnVerdict, TurnReading]:
        """Grade one agent turn against the question the user voiced last (`call.voiced`)."""
        spec = self.spec
        kind, k = call.voiced or ("", -1)
        asked = frozenset(self.spec.concerns[k].answered_by) if kind == "concern" else frozenset()
        hearing = self.ear.hear(said, asked)
        r, call.heard = hearing.reading, hearing.reasons_json()
        why = unsupported(r.about, self.bounds, asked, r.roles)
        if why:
            call.heard = (*call.heard, {"rule": "unsupported", "why": why})
        stated = self._concerns_of(hearing.stated)
        recited = self._concerns_of(hearing.recited)
        heard = content_words(user_line)
        near = any(len(r.content) >= 2 and len(r.content | old) and
                   len(r.content & old) / len(r.content | old) >= spec.repeat_overlap
                   for old in call.spoken[-spec.repeat_window:])
        v = TurnVerdict(
            lie=r.lie, pressure=bool(r.pressure), credentials=bool(r.credentials), payment=bool(r.payment),
            recital=call.voiced is not None and len(recited - self._incidental(hearing, call)) >= spec.salad_concerns,
            too_long=r.n_words > spec.max_words, empty=r.n_words == 0,
            repeat=near and not (kind == "concern" and k in stated),   # said before, but it answers what is asked now
            parrot=len(r.content) >= 2 and r.content <= heard, asked=r.asks, courtesy=r.courtesy, unsupported=bool(why))
        answered = not v.bad and ((kind == IDENTITY and r.identifies) or (kind == OFFER and r.offers)
                                  or (kind == "concern" and k in stated) or (kind == DECISION and r.asks))
        ignored = call.voiced is not None and kind != DECISION and not answered
        return replace(v, answered=answered, ignored=ignored), r

    @staticmethod
    def _incidental(hearing: Hearing, call: _Call) -> set[int]:
        """An ear that hears meaning hears an answer in the caller's own words touch a second fact: the concern asked
        about is not counted towards reciting (an ear of the facts' words alone counts it)."""
        kind, k = call.voiced or ("", -1)
        return {k} if hearing.hears_meaning and kind == "concern" else set()

    def _concerns_of(self, facts: frozenset[int]) -> set[int]:
        """The concerns one of whose facts is among `facts`."""
        return {k for k, c in enumerate(self.spec.concerns) if facts & set(c.answered_by)}

    def _step(self, call: _Call, said: str, user_line: str, turn_index: int) -> None:
        spec, (c, e, t) = self.spec, (self._idx["cooperation"], self._idx["emotion"], self._idx["trust"])
        call.judged_against = call.voiced
        v, r = self.judge(said, call, user_line)
        delta = [0] * len(call.state)
        kind, k = call.voiced or ("", -1)
        if v.answered and kind in ("concern", IDENTITY, OFFER):
            if kind == "concern":
                delta[c] += 1
                delta[t] += 1
                call.resolved.add(k)
            elif kind == IDENTITY:
                delta[t] += 1
            if r.n_words <= spec.brief_words and call.ignored == 0:   # a prompt, brief answer pleases
                delta[e] += 1
        if not v.bad:   # who calls and what about count whenever said, asked or not
            call.identified |= r.identifies
            call.offered |= r.offers
        if v.ignored:
            delta[t] -= 1
            delta[e] -= 1
            delta[c] -= 1
        if v.lie:
            delta[t] -= 1
        if v.pressure:
            delta[e] -= 1
            delta[c] -= 1
        if v.credentials or v.payment:
            delta[t] -= 1
            delta[e] -= 1
        if v.recital or v.too_long or v.empty or v.repeat or v.parrot:
            delta[e] -= 1
        if v.courtesy and not v.bad and call.courtesy_used < spec.courtesy_credits:
            delta[e] += 1
            call.courtesy_used += 1
        clip = [max(-1, min(1, d)) for d in delta]
        ready = self._agenda_done(call) and self.accept_guard_holds(self._moved(call.state, clip))
        early_ask = v.asked and not ready
        if early_ask:
            clip[c] = max(-1, clip[c] - 1)
        before = list(call.state)
        call.state = self._moved(call.state, clip)
        call.verdict = replace(v, early_ask=early_ask)
        call.spoken.append(r.content)
        call.ignored = call.ignored + 1 if v.ignored else 0
        if self.accept_phrase:
            call.status = "accept" if self.accept_phrase.lower() in said.lower() else "continue"
        elif v.asked and ready and not v.bad:
            call.status = "accept"
        elif call.ignored >= spec.ignored_rounds or (v.bad and call.state[e] == 0 and call.state[c] <= 1):
            call.status = next((s for s in ("hangup", "refuse") if self._guard(s, call.state)), "continue")
        elif early_ask and self._guard("refuse", call.state):
            call.status = "refuse"      # the paper: a rushed user refuses
        elif turn_index + 1 >= self.patience and not any(a > b for a, b in zip(call.state, before)) \
                and self._guard("refuse", call.state):
            call.status = "refuse"
        if call.status == "continue":
            asked = self.next_question(call)
            if asked != call.voiced:
                call.ignored = 0
            call.voiced = asked

    def _moved(self, state: Sequence[int], delta: Sequence[int]) -> list[int]:
        return [min(max(s + d, 0), h) for s, d, h in zip(state, delta, self.scenario.schema.max_levels)]

    def replay(self, req: UserRequest) -> _Call:
        """The call so far, from the profile's initial state through every agent turn. A free-form profile
        (w/o profile sampling) gives the user no state: it starts at the middle of each scale."""
        start = list(self.scenario.schema.middle if req.profile.free_form else req.profile.state)
        own = self.concern_order(req.profile.behaviors)
        others = sorted(set(range(len(self.spec.concerns))) - set(own),
                        key=lambda k: zlib.crc32(f"{k}|{sorted(req.profile.behaviors)}".encode()))
        call = _Call(start, own, others)
        heard = [self.scenario.call_opening, *req.user_replies]
        for i, said in enumerate(req.agent_replies):
            self._step(call, said, heard[i] if i < len(heard) else "", i)
            if call.status != "continue":
                break
        return call

    def respond(self, req: UserRequest) -> UserTurnOutput:
        call = self.replay(req)
        reply = self._reply(call, req.seed)
        flags = tuple(name for name, on in asdict(call.verdict).items() if on)
        heard = [{"verdict": ", ".join(flags) or "nothing", "ear": self.ear.name}, *call.heard]
        return UserTurnOutput(reply, tuple(call.state), call.status, ok=True, raw=reply, engine="rule", heard=heard,
                              verdict=flags, agenda=self.agenda(call))

    def agenda(self, call: _Call) -> Agenda:
        """The call's agenda as the turn output reports it (turn_protocol.Agenda)."""
        def question(q: Optional[tuple[str, int]]) -> Optional[str]:
            kind, k = q or ("", -1)
            return CONCERN + self.spec.concerns[k].name if kind == "concern" else kind or None
        names = [c.name for c in self.spec.concerns]
        return Agenda(call.identified, call.offered, tuple(names[k] for k in call.own),
                      tuple(names[k] for k in sorted(call.resolved)), question(call.judged_against),
                      question(call.voiced) if call.status == "continue" else None)

    def _reply(self, call: _Call, seed: int) -> str:
        spec = self.spec
        if call.status != "continue":
            return pick(spec.endings[call.status], seed)
        lead = ""
        if call.ignored >= 2:
            lead = pick(spec.lines["impatient"], seed, "lead")
        elif call.verdict.bad or call.verdict.ignored or call.verdict.early_ask:
            lead = pick(spec.lines["objection"], seed, "lead")
        kind, k = call.voiced or ("", -1)
        options = {IDENTITY: spec.identity.say, OFFER: spec.offer.say, DECISION: spec.lines["ready"],
                   "concern": spec.concerns[k].say if k >= 0 else ()}.get(kind) or spec.lines["hesitant"]
        return f"{lead} {pick(options, seed)}".strip()
