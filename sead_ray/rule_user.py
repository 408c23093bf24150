"""The `rule` user simulator: a transparent state machine with no model.

It exists for fast deterministic tests, for the planted-preference learning test and as a sanity
baseline; it is never the default for real training. Its state moves on simple features of the
agent's spoken words:

- polite words (thank, please, sorry, ...)       emotion +1
- two or more content words of the scenario facts trust +1 (skeptical behaviors need one more word each)
- more than 60 words, or the same words twice     emotion -1 (a repeat also costs cooperation 1)
- nothing said                                    emotion -1
- trust >= 3 and emotion >= 2 and no penalty      cooperation +1
Status: accept when cooperation >= 3, trust >= 4 and the agent asks for the decision (an
activation/sign-up word); hang up when emotion is 0 and cooperation <= 1; refuse once
the call has lasted `patience` agent turns and the latest one brought no state gain. With
`accept_phrase` set (planted preference), the user accepts exactly when the agent's words
contain that phrase and otherwise behaves as above but never accepts.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .dialogue import UserRequest, UserTurnOutput
from .scenario import Scenario

_WORD = re.compile(r"[a-z0-9]+")
_POLITE = {"thank", "thanks", "please", "sorry", "appreciate", "hello", "hi", "good"}
_ASK = {"activate", "activation", "sign", "start", "register", "agree", "set"}
_OPENERS = {0: "Look, I'm busy.", 1: "Hmm.", 2: "Okay.", 3: "Oh, nice."}


@dataclass
class RuleUserSimulator:
    scenario: Scenario
    accept_phrase: str = ""
    patience: int = 6

    def __post_init__(self) -> None:
        words = set()
        for fact in self.scenario.facts + [self.scenario.objective]:
            words.update(w for w in _WORD.findall(fact.lower()) if len(w) >= 5 or w.isdigit())
        self.fact_words = frozenset(words)
        names = self.scenario.schema.names
        self._idx = {n: names.index(n) for n in ("cooperation", "emotion", "trust") if n in names}
        if len(self._idx) != 3:
            raise ValueError("the rule simulator needs state dimensions cooperation, emotion and trust")

    def _skeptic_level(self, behaviors: Sequence[str]) -> int:
        skeptic = {b.text for b in self.scenario.behaviors
                   if b.category in ("Trust_and_Skepticism", "Identity_Verification")}
        return sum(b in skeptic for b in behaviors)

    def respond(self, req: UserRequest) -> UserTurnOutput:
        said = req.agent_replies[-1] if req.agent_replies else ""
        words = _WORD.findall(said.lower())
        state = list(req.current_state)
        hi = self.scenario.schema.max_levels
        c, e, t = self._idx["cooperation"], self._idx["emotion"], self._idx["trust"]
        before = tuple(state)

        penalty = False
        if not words or said.strip() in ("", "..."):
            state[e] -= 1
            penalty = True
        if len(words) > 60:
            state[e] -= 1
            penalty = True
        if len(req.agent_replies) >= 2 and said.strip().lower() == req.agent_replies[-2].strip().lower():
            state[e] -= 1
            state[c] -= 1
            penalty = True
        if not penalty and _POLITE & set(words):
            state[e] += 1
        overlap = len(self.fact_words & set(words))
        if overlap >= 2 + self._skeptic_level(req.profile.behaviors):
            state[t] += 1
        if not penalty and state[t] >= 3 and state[e] >= 2:
            state[c] += 1
        state = [min(max(v, 0), h) for v, h in zip(state, hi)]

        asked = bool(_ASK & set(words))
        if self.accept_phrase:
            accepted = self.accept_phrase.lower() in said.lower()
        else:
            accepted = state[c] >= 3 and state[t] >= 4 and asked
        gained = any(a > b for a, b in zip(state, before))
        if accepted:
            status = "accept"
        elif state[e] == 0 and state[c] <= 1:
            status = "hangup"
        elif req.turn_index + 1 >= self.patience and not gained:
            status = "refuse"
        else:
            status = "continue"
        reply = self._reply(req, tuple(state), status)
        return UserTurnOutput(reply, tuple(state), status, ok=True, raw=reply, engine="rule")

    def _reply(self, req: UserRequest, state: tuple, status: str) -> str:
        e = state[self._idx["emotion"]]
        if status == "accept":
            return "Alright, go ahead and activate it for me."
        if status == "refuse":
            return "No, I'm not interested. Goodbye."
        if status == "hangup":
            return "I don't have time for this. (hangs up)"
        behaviors = req.profile.behaviors
        concern = behaviors[req.turn_index % len(behaviors)] if behaviors else "What exactly are you offering?"
        return f"{_OPENERS.get(e, 'Okay.')} {concern.rstrip('.')}."
