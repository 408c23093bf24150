"""What an ear of the rule user returns for one agent turn (ears.py): a typed reading, and why, clause by clause.

Every ear answers the same questions, so the simulator never asks which ear heard the turn: which facts the turn
states (`Hearing.stated`), which count towards reciting (`recited`), and the rest of the reading (lies, red flags,
who calls, the offer, the ask: `reading`). The reasons are what the call record and the viewer show.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from sead_ray.user.rule.lexicon import TurnReading


class Reason(Protocol):
    def to_json(self) -> dict: ...


@dataclass(frozen=True)
class Hearing:
    """One agent turn as an ear heard it."""
    reading: TurnReading                  # the lexicon's reading, corrected by the ear (lies, red flags, roles, ask)
    stated: frozenset[int]                # the facts the turn states
    recited: frozenset[int]               # the facts that count towards reciting several concerns at once
    hears_meaning: bool                   # an answer in other words may touch a second fact: the asked concern is
                                          # not counted towards reciting (an ear of the facts' words alone counts it)
    reasons: tuple[Reason, ...] = ()

    def reasons_json(self) -> tuple[dict, ...]:
        return tuple(r.to_json() for r in self.reasons)


@dataclass(frozen=True)
class LexicalReason:
    """A rule of the lexicon that decided (the facts it read, a lie, a red flag), with its words."""
    rule: str
    words: tuple[str, ...] = ()
    states: tuple[tuple[int, tuple[str, ...]], ...] = ()    # fact -> its terms, where the rule is what a turn states

    def to_json(self) -> dict:
        if self.states:
            return {"rule": self.rule, "states": {str(k): list(v) for k, v in self.states}}
        return {"rule": self.rule, "words": list(self.words)}


class Heard(Enum):
    """What the semantic ear made of one clause."""
    STATES = "states"               # states a fact
    LIE = "lie"                     # lies about a fact
    UNCLEAR = "unclear"             # between a fact and a lie about it
    PRESSURE = "pressure"
    CREDENTIALS = "credentials"
    PAYMENT = "payment"
    IDENTITY = "identity"
    OFFER = "offer"
    ASK = "ask"
    REASSURANCE = "reassurance"
    SMALL_TALK = "small_talk"
    NOTHING = "nothing"


RED_FLAGS = (Heard.PRESSURE, Heard.CREDENTIALS, Heard.PAYMENT)


@dataclass(frozen=True)
class ClauseVerdict:
    """What the semantic ear made of one clause, and why."""
    clause: str
    label: str                  # the nearest prototype's label
    fact: int                   # the fact a fact, lie or answer is about (-1 otherwise)
    similarity: float
    prototype: str
    heard: Heard
    note: str = ""              # how a fact was heard where it is not the nearest prototype ("the answer asked for")
    vetoed_by: str = ""         # the lexical rule that overrode the model, if any

    @property
    def verdict(self) -> str:
        """The verdict in words, as the call record has always written it ("states fact 3", "lie about fact 1")."""
        if self.heard is Heard.STATES:
            return f"states fact {self.fact}" + (f" ({self.note})" if self.note else "")
        if self.heard is Heard.LIE:
            return f"lie about fact {self.fact}"
        if self.heard is Heard.UNCLEAR:
            return f"unclear between fact {self.fact} and a lie about it"
        return self.heard.value

    def to_json(self) -> dict:
        return {"clause": self.clause, "verdict": self.verdict, "nearest": self.prototype,
                "similarity": round(self.similarity, 3), **({"vetoed_by": self.vetoed_by} if self.vetoed_by else {})}
