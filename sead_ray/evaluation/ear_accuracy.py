"""How well an ear of the rule user (sead_ray.user.rule.ears) hears a scenario's ear lines (sead_ray.scenario.ear_lines),
line by line: per class the share heard as meant, with a 95 % interval, and the false alarms.

    fact, terse          heard: the ear states the line's fact (semantic: the model heard it; lexicon: the fact's
                         answer_terms); false alarm: heard as a lie or a red flag
    lie                  flagged: heard as a lie (contradiction, invented claim); "heard" as the fact is the miss
                         that costs most (a lie taken as an answer)
    swap                 a fact's lie heard as the answer to that fact's question (its fact expected, as in a call):
                         correct when it is not taken as the answer (a lie, a red flag, or more than the fact says:
                         sead_ray.user.rule.fact_check)
    pressure, credentials, payment    flagged: that red flag (credentials and payment count for each other)
    identity, offer, ask heard: the ear hears who calls / the offer / the ask
    reassurance, small_talk           correct: no fact heard (not an answer) and no red flag
    clean                false alarm: any red flag or lie in an honest line that names them only to deny them
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sead_ray.evaluation.significance import wilson_interval
from sead_ray.user.rule.fact_check import FactBounds, unsupported
from sead_ray.user.rule.hearing import Hearing


@dataclass(frozen=True)
class LineScore:
    text: str
    label: str
    fact: int
    correct: bool         # heard as meant (see the module's table)
    false_alarm: bool     # an honest line heard as a lie or red flag


def score_line(hearing: Hearing, text: str, label: str, fact: int, bounds: Sequence[FactBounds] = ()) -> LineScore:
    """One line as the rule user hears it; with the facts' `bounds`, a fact line (or swap) that says more than its
    fact is not heard as the fact."""
    reading = hearing.reading
    flagged = bool(reading.red_flag or reading.lie)
    answer = fact in hearing.stated and not flagged and not (
        bounds and unsupported(reading.about, bounds, frozenset([fact]), reading.roles))
    requests = bool(reading.credentials or reading.payment)
    any_fact = bool(hearing.stated)
    correct = {
        "fact": answer, "terse": answer, "swap": not answer,
        "lie": reading.lie,
        "pressure": bool(reading.pressure),
        "credentials": requests, "payment": requests,
        "identity": reading.identifies, "offer": reading.offers, "ask": reading.asks,
        "reassurance": not any_fact and not flagged, "small_talk": not any_fact and not flagged,
        "clean": not flagged,
    }[label]
    honest = label in ("fact", "terse", "identity", "offer", "ask", "clean", "small_talk")
    return LineScore(text, label, fact, bool(correct), honest and flagged)


def accuracy_table(ear: Any, labelled: Sequence[tuple[str, str, int]], expected: bool = False,
                   bounds: Sequence[FactBounds] = ()) -> dict[str, dict]:
    """Per label: n, correct share and its interval, false alarms and theirs; plus every line's misses.
    `expected`: each honest fact line heard as the answer to a question about its fact (as in a call; a swap
    always is). `bounds` (fact_check.scenario_bounds): fact lines held to their facts, as the rule user does."""
    def expecting(label: str, fact: int) -> frozenset[int]:
        return frozenset([fact]) if label == "swap" or label in ("fact", "terse") and expected else frozenset()
    scores = [score_line(ear.hear(text, expecting(label, fact)), text, label, fact, bounds)
              for text, label, fact in labelled]
    table = {}
    for label in dict.fromkeys(s.label for s in scores):
        mine = [s for s in scores if s.label == label]
        ok, alarms = sum(s.correct for s in mine), sum(s.false_alarm for s in mine)
        table[label] = {"n": len(mine), "correct": ok / len(mine), "correct_ci": list(wilson_interval(ok, len(mine))),
                        "false_alarms": alarms / len(mine), "false_alarms_ci": list(wilson_interval(alarms, len(mine))),
                        "misses": [s.text for s in mine if not s.correct]}
    return table
