"""The `rule` user simulator: a transparent, hard-to-game user with no model, driven by the scenario.

It is the embedded demo's simulator (a 135M model cannot role-play a fair user, see README) and the
fast simulator of tests. Everything it knows comes from the scenario's `rule_user` section: the
concerns a user raises (which behavior categories raise them, the words the user says, the facts that
answer them), the red-flag phrases, the words that ask for the decision, and the status guards.

The user voices one concern at a time (the profile's own first, then the scenario's others). Per agent
turn, after the paper's order (state first, then status, then the spoken reply):

- an answer to *the concern just voiced* with a fact that answers it (at least `answer_words`
  distinctive words of one of its facts)      trust +1, cooperation +1, next concern
- words of many concerns at once (a keyword salad), more than `max_words` words, nothing said, or the
  same words as the previous turn              no credit, emotion -1
- a red flag (bank card number, pay now, pressure, ...)      trust -1, emotion -1
- asking for the decision (a decision word) before the status guard of `accept` holds, without
  answering the concern                       cooperation -1 ("too early")
- polite words, at most `polite_credits` times per call      emotion +1
- the guard of `accept` holds after an answer, or when the agent asks for the decision   accept
  (the paper: the user accepts once its state reaches the threshold)
- emotion 0 and cooperation <= 1 after a penalised turn       hang up
- `patience` turns played and the latest brought no gain      refuse

A concern answered once is resolved, so repeating its words earns nothing. The simulator is stateless:
each turn it replays the call from the profile's initial state (calls are at most a few turns long), so
retries, replays and any actor of the pool give the same answer.

`accept_phrase` (planted preference, tests only): accept exactly when the agent's words contain it.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from .concerns import RuleUserSpec
from .dialogue import UserRequest, UserTurnOutput
from .scenario import Scenario

_WORD = re.compile(r"[a-z0-9]+")
# Words too common to show that a reply uses a fact (and the scenario's titles, added per scenario).
_COMMON = frozenset("""about after also before being call calls could does from have here into just like
make more most much only other over same some than that their them then there these they this those
through under very want were what when where which while will with would your yours""".split())


def words_of(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _content_words(text: str, ignore: frozenset) -> set[str]:
    return {w for w in words_of(text) if (len(w) >= 4 or w.isdigit()) and w not in _COMMON and w not in ignore}


def _has_phrase(said_words: Sequence[str], phrase: str) -> bool:
    return f" {' '.join(words_of(phrase))} " in f" {' '.join(said_words)} "


@dataclass(frozen=True)
class TurnVerdict:
    """What the rule user made of one agent turn (also the grades `sead-ray simcheck` reports)."""
    answered: bool = False
    salad: bool = False
    too_long: bool = False
    empty: bool = False
    repeat: bool = False
    red_flag: bool = False
    early_ask: bool = False
    asked: bool = False
    polite: bool = False

    @property
    def penalised(self) -> bool:
        return self.salad or self.too_long or self.empty or self.repeat or self.red_flag or self.early_ask


@dataclass
class _CallState:
    state: list[int]
    order: list[int]               # the call's concerns, in the order the user raises them
    resolved: int = 0              # concerns answered so far
    polite_used: int = 0
    status: str = "continue"
    verdict: TurnVerdict = TurnVerdict()

    @property
    def concern(self) -> Optional[int]:
        """The concern the user voiced last (None once every concern is resolved)."""
        return self.order[self.resolved] if self.resolved < len(self.order) else None


class RuleUserSimulator:
    def __init__(self, scenario: Scenario, accept_phrase: str = "", patience: int = 6):
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
        titles = frozenset(words_of(f"{scenario.agent_title} {scenario.user_title}"))
        fact_words = [_content_words(f, titles) for f in scenario.facts]
        # A concern's distinctive words: those of its facts that no other concern's facts use.
        self.answer_words: list[list[set[str]]] = []
        for concern in self.spec.concerns:
            others = set().union(*(fact_words[i] for other in self.spec.concerns if other is not concern
                                   for i in other.answered_by))
            self.answer_words.append([fact_words[i] - others for i in concern.answered_by])

    def concern_order(self, behaviors: Sequence[str]) -> list[int]:
        """The profile's own concerns first (in the order of its behaviors), then the scenario's others."""
        category = {b.text: b.category for b in self.scenario.behaviors}
        own = []
        for text in behaviors:
            for i, concern in enumerate(self.spec.concerns):
                if category.get(text) in concern.categories and i not in own:
                    own.append(i)
        return own + [i for i in range(len(self.spec.concerns)) if i not in own]

    def accept_guard_holds(self, state: Sequence[int]) -> bool:
        guard = self.scenario.status_guards.get("accept")
        return guard is None or guard.allows(self.scenario.schema, tuple(state))

    def judge(self, said: str, previous: str, concern: Optional[int], guard_holds: bool) -> TurnVerdict:
        """Grade one agent turn against the concern the user voiced last."""
        spec = self.spec
        said_words = words_of(said)
        if not said_words:
            return TurnVerdict(empty=True)
        word_set = set(said_words)
        hits = [max(len(ws & word_set) for ws in words) for words in self.answer_words]
        salad = sum(h >= spec.answer_words for h in hits) >= spec.salad_concerns
        too_long = len(said_words) > spec.max_words
        repeat = bool(previous) and words_of(previous) == said_words
        red_flag = any(_has_phrase(said_words, p) for p in spec.red_flags)
        asked = any(_has_phrase(said_words, p) for p in spec.decision_words)
        polite = any(_has_phrase(said_words, p) for p in spec.polite_words)
        answered = concern is not None and hits[concern] >= spec.answer_words
        early_ask = asked and not guard_holds and not answered
        answered = answered and not (salad or too_long or repeat or red_flag)
        return TurnVerdict(answered, salad, too_long, False, repeat, red_flag, early_ask, asked, polite)

    def _step(self, call: _CallState, said: str, previous: str, turn_index: int) -> None:
        c, e, t = self._idx["cooperation"], self._idx["emotion"], self._idx["trust"]
        v = self.judge(said, previous, call.concern, self.accept_guard_holds(call.state))
        delta = [0] * len(call.state)
        if v.answered:
            delta[t] += 1
            delta[c] += 1
            call.resolved += 1
        if v.red_flag:
            delta[t] -= 1
        if v.penalised and not v.early_ask:
            delta[e] -= 1
        if v.early_ask:
            delta[c] -= 1
        if v.polite and not v.penalised and call.polite_used < self.spec.polite_credits:
            delta[e] += 1
            call.polite_used += 1
        before = list(call.state)
        call.state = [min(max(s + d, 0), h) for s, d, h in zip(call.state, delta, self.scenario.schema.max_levels)]
        call.verdict = v
        if self.accept_phrase:
            accepted = self.accept_phrase.lower() in said.lower()
        else:
            # the paper's acceptance: the state reached the threshold, on an answer or when asked
            accepted = (v.asked or v.answered) and not v.red_flag and self.accept_guard_holds(call.state)
        if accepted:
            call.status = "accept"
        elif call.state[e] == 0 and call.state[c] <= 1 and v.penalised:
            call.status = "hangup"
        elif turn_index + 1 >= self.patience and not any(a > b for a, b in zip(call.state, before)):
            call.status = "refuse"

    def replay(self, req: UserRequest) -> _CallState:
        """The call so far, from the profile's initial state through every agent turn. A free-form profile
        (w/o profile sampling) gives the user no state: it starts at the middle of each scale."""
        start = ([d.max_level // 2 for d in self.scenario.schema.dimensions] if req.profile.free_form
                 else list(req.profile.state))
        call = _CallState(start, self.concern_order(req.profile.behaviors))
        for i, said in enumerate(req.agent_replies):
            self._step(call, said, req.agent_replies[i - 1] if i else "", i)
            if call.status != "continue":
                break
        return call

    def respond(self, req: UserRequest) -> UserTurnOutput:
        call = self.replay(req)
        reply = self._reply(call)
        return UserTurnOutput(reply, tuple(call.state), call.status, ok=True, raw=reply, engine="rule")

    def _reply(self, call: _CallState) -> str:
        spec = self.spec
        if call.status != "continue":
            return spec.endings[call.status]
        concern = call.concern
        if concern is None:
            return spec.ready_line if self.accept_guard_holds(call.state) else spec.idle_line
        lead = spec.objection if call.verdict.penalised else ""
        return f"{lead} {spec.concerns[concern].say}".strip()
