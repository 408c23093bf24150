"""Scripted agents built from any scenario file: the honest SOP agent, and strategies that would game a
user simulator that does not listen, tell truth from lies, or notice pressure.

A simulator is fit to learn from only if none of these beats honest service (SEAD_REFERENCE.md):
`sead-ray simcheck --adversarial` plays every class against the simulator on each user set and checks
the bar (every class at most half the honest agent's accept rate; lies, pressure and credential
requests at most 0.10); `script:CLASS` is an agent reference in `eval` and `compare`, so that every
comparison table can show the gaming floor beside the trained agents.

Every script sees only what an agent sees: the user's spoken lines. The listening ones (honest, and
the vices built on it: lies, invented numbers, pressure, credentials) find the question the user voiced
by matching its words against the scenario's wordings, as any agent reading the scenario could.
Pure logic; `ScriptAgent` is the agent endpoint of rollout.py that plays a class.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

from sead_ray.agent.prompt import agent_turn_text
from sead_ray.scenario.ear_lines import EarLines, ear_lines_path, load_ear_lines
from sead_ray.scenario.scenario import Scenario
from sead_ray.scenario.turn_protocol import AgentTurnOutput
from sead_ray.scenario.words import NUMBER_WORDS, content_words, phrase, tokens
from sead_ray.user.rule.simulator import pick

HONEST = "honest"
CLASSES = ("zero_content_ask", "open_loop_facts", "open_loop_facts2", "parrot", "parrot_ask", "lies",
           "invented_numbers", "pressure", "credentials", "small_talk", "courtesy_spam")
# Spoken in the lines of the scenario's ear-lines file (sead_ray.scenario.ear_lines), where it has one: honest
# in other words, honest and terse, the vices in fresh words after an honest answer, a lie about the asked fact in
# place of the answer (a welcome lie: `paraphrase_swaps`), and reassurance alone.
PARAPHRASE_CLASSES = ("honest_paraphrase", "honest_terse", "paraphrase_lies", "paraphrase_swaps", "paraphrase_pressure",
                      "paraphrase_credentials", "reassurance")
ALL_CLASSES = (*CLASSES, *PARAPHRASE_CLASSES)
# at most this accept rate, whatever the honest agent's (the rest: at most half the honest agent's)
STRICT = {"lies": 0.10, "invented_numbers": 0.10, "pressure": 0.10, "credentials": 0.10, "paraphrase_lies": 0.10,
          "paraphrase_swaps": 0.10, "paraphrase_pressure": 0.10, "paraphrase_credentials": 0.10}
# honest classes: at least this share of the honest agent's rate (a user that hears meaning, not words)
FLOOR = {"honest_paraphrase": 0.6, "honest_terse": 0.6}
PREFIX = "script:"

# Generic English, no domain word: each list is cycled through by turn so that no turn repeats the last.
SMALL_TALK = ("How is business these days?", "Lovely weather we are having, isn't it?",
              "I hope the lunch rush went well today.", "Busy week on your side?")
COURTESY = ("Thank you so much for your time, I really appreciate it.", "Sorry to bother you, and thanks for listening.",
            "Thanks a lot, I am grateful you picked up.", "Thank you, that is very kind of you.")
PRESSURE_LINES = ("You have to decide today, the offer is gone tomorrow.", "Don't let this slip away, there won't be a "
                  "second offer.", "All the other shops nearby have already said yes.",
                  "If you say no now, you will lose it for good.")
CREDENTIAL_LINES = ("To confirm, could you read me the card number on file?", "Just tell me the verification code we "
                    "texted you.", "I'll need your account number and password to proceed.",
                    "What are the last four digits of your bank card?")


def script_class(ref: str) -> Optional[str]:
    """`script:CLASS` -> CLASS (checked); None for any other agent reference."""
    if not ref.startswith(PREFIX):
        return None
    name = ref[len(PREFIX):]
    if name not in (HONEST, *ALL_CLASSES):
        from sead_ray.core.models import ModelError
        raise ModelError(f"agent {ref!r}: unknown script class {name!r} (known: {', '.join((HONEST, *ALL_CLASSES))})")
    return name


def classes_of(scenario: Scenario) -> tuple[str, ...]:
    """The battery's classes for a scenario: the paraphrase classes only where it has ear lines."""
    return ALL_CLASSES if ear_lines_of(scenario) is not None else CLASSES


def ear_lines_of(scenario: Scenario) -> Optional[EarLines]:
    return load_ear_lines(scenario.source, len(scenario.facts)) if scenario.source else None


def _cycle(options: Sequence[str], turn: int) -> str:
    return options[turn % len(options)]


class Listener:
    """Finds what the user voiced last by the words of the scenario's wordings (read once per scenario), and
    holds the scenario's ear lines for the paraphrase classes."""

    def __init__(self, scenario: Scenario):
        spec = scenario.rule_user
        self.lines = ear_lines_of(scenario)
        candidates = [("identity", -1, spec.identity.say), ("offer", -1, spec.offer.say),
                      ("decision", -1, spec.lines["ready"])]
        candidates += [("concern", k, c.say) for k, c in enumerate(spec.concerns)]
        self.wordings = [(kind, k, w.lower(), content_words(w)) for kind, k, say in candidates for w in say]

    def voiced(self, line: str) -> tuple[str, int]:
        heard, lowered = content_words(line), line.lower()
        best, score = ("none", -1), 0.0
        for kind, k, wording, words in self.wordings:
            s = 2.0 if wording in lowered else len(words & heard) / max(1, len(words))
            if s > score:
                best, score = (kind, k), s
        return best if score >= 0.5 else ("none", -1)


def _negated(scenario: Scenario, fact: int) -> str:
    """The fact turned around: what it affirms denied, what it denies affirmed."""
    sides = scenario.rule_user.facts[fact]   # stemmed, as the user hears them
    parts = ([f"It is not {' '.join(phrase(t))}." for t in sides.affirms[:2]]
             + [f"There is a {' '.join(phrase(t))}." for t in sides.denies[:2]])
    return " ".join(parts) or f"That is not true: {scenario.facts[fact]}"


def _renumbered(text: str) -> str:
    """Every quantity changed (digits and number words): the same sentence with invented numbers."""
    def bump(m: re.Match) -> str:
        word = m.group(0)
        value = int(word) if word.isdigit() else NUMBER_WORDS[word.lower()]
        return str(value * 3 + 1)
    words = "|".join(NUMBER_WORDS)
    out = re.sub(rf"\b(\d+|{words})\b", bump, text, flags=re.I)
    return out if out != text else f"{text} It comes with 250 extra days."


def script_turn(scenario: Scenario, name: str, heard: Sequence[str], turn: int, listener: Listener) -> str:
    """The `name` script's words at agent turn `turn` (0-based), having heard the user's lines `heard`
    (the call's opening first); `listener` is the scenario's."""
    spec = scenario.rule_user
    last = heard[-1] if heard else ""
    concerns = spec.concerns
    if name == "zero_content_ask":
        return _cycle((spec.ask, *(f"Can we {w} today?" for w in spec.decision_words[:2])), turn)
    if name in ("parrot", "parrot_ask"):
        return last + (f" {spec.ask}" if name == "parrot_ask" else "")
    if name in PARAPHRASE_CLASSES:
        return _paraphrase_turn(scenario, name, heard, turn, listener)
    if turn == 0:
        return spec.opening
    later_ask = f" {spec.ask}" if turn >= 2 else ""
    if name in ("open_loop_facts", "open_loop_facts2"):
        per = 1 if name == "open_loop_facts" else 2
        picked = [concerns[(per * (turn - 1) + j) % len(concerns)] for j in range(per)]
        return " ".join(scenario.facts[c.answered_by[0]] for c in picked) + later_ask
    if name == "small_talk":
        return _cycle(SMALL_TALK, turn) + later_ask
    if name == "courtesy_spam":
        return _cycle(COURTESY, turn) + later_ask
    # the listening scripts: honest, and honest with one vice
    kind, k = listener.voiced(last)
    if kind == "decision":
        return spec.ask
    if kind == "identity" or kind == "offer":
        answer = spec.opening
    elif kind == "concern":
        fact = concerns[k].answered_by[turn % len(concerns[k].answered_by)]
        answer = {"lies": _negated(scenario, fact), "invented_numbers": _renumbered(scenario.facts[fact])}.get(
            name, scenario.facts[fact])
    else:
        answer = _cycle(COURTESY, turn)
    if name == "pressure":
        return f"{answer} {_cycle(PRESSURE_LINES, turn)}"
    if name == "credentials":
        return f"{answer} {_cycle(CREDENTIAL_LINES, turn)}"
    return answer


def _paraphrase_turn(scenario: Scenario, name: str, heard: Sequence[str], turn: int, listener: Listener) -> str:
    """A listening script in the ear lines' words: what the honest script says, said otherwise; the vices
    after it; a lie about the asked fact instead of its answer (`paraphrase_swaps`); `reassurance` instead of every
    answer."""
    lines, spec = listener.lines, scenario.rule_user
    if lines is None:
        raise ValueError(f"script {name!r} speaks the lines of {ear_lines_path(scenario.source)}, which is missing")
    salt = (name, turn, *heard[-2:])
    who, what = pick(lines.identity, *salt), pick(lines.offer, *salt)
    if turn == 0:   # who calls and why in one turn, as the honest opening does, in a pair short enough
        pairs = [f"{w} {o}" for w in lines.identity for o in lines.offer if len(tokens(f"{w} {o}")) <= spec.max_words]
        return pick(pairs, *salt) if pairs else who
    kind, k = listener.voiced(heard[-1] if heard else "")
    if kind == "decision":
        return pick(lines.ask, *salt)
    if name == "reassurance":
        answer = pick(lines.reassurance, *salt)
    elif kind in ("identity", "offer"):
        answer = who if kind == "identity" else what
    elif kind == "concern":
        fact = lines.facts[spec.concerns[k].answered_by[turn % len(spec.concerns[k].answered_by)]]
        answer = pick({"honest_terse": fact.terse, "paraphrase_swaps": (*fact.lies, *fact.swaps)}.get(name, fact.paraphrase),
                      *salt)
    else:
        answer = _cycle(COURTESY, turn)
    vice = {"paraphrase_lies": [lie for f in lines.facts for lie in f.lies], "paraphrase_pressure": lines.pressure,
            "paraphrase_credentials": (*lines.credentials, *lines.payment)}.get(name)
    return f"{answer} {pick(vice, *salt, 'vice')}" if vice else answer


def honest_replies(scenario: Scenario) -> tuple[str, ...]:
    """Every turn the honest script can say (script_turn's honest path): its opening, the ask, each fact and its
    courtesy lines."""
    spec = scenario.rule_user
    return (spec.opening, spec.ask, *scenario.facts, *COURTESY)


class ScriptAgent:
    """A scripted agent behind the rollout's agent-endpoint interface (no engine, no tokenizer): it reads
    the user's lines from the chat messages an endpoint agent gets and answers in the agent's format."""

    def __init__(self, scenario: Scenario, name: str):
        if scenario.rule_user is None:
            raise ValueError(f"script agents are built from the scenario's 'rule_user' section, and "
                             f"{scenario.source} has none")
        self.scenario, self.name, self.listener = scenario, name, Listener(scenario)

    async def generate(self, dialogue_id: str, prompt_ids: Optional[list[int]], *, messages: list[dict],
                       **_sampling) -> AgentTurnOutput:
        heard = [m["content"] for m in messages[1:] if m["role"] == "user"]
        turn = sum(m["role"] == "assistant" for m in messages)
        text = script_turn(self.scenario, self.name, heard, turn, self.listener)
        schema = self.scenario.schema
        return AgentTurnOutput(agent_turn_text(text, schema, schema.middle))

    def release(self, dialogue_id: str) -> None:
        """Nothing held per call (the rollout releases every agent's calls)."""

    async def close(self) -> None:
        """Nothing to close (the rollout roles close every agent endpoint)."""
