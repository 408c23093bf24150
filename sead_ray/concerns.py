"""The scenario's `rule_user` section: what the transparent `rule` simulator (rule_user.py) knows of a
domain. Kept apart from scenario.py so that the scenario loader stays about the paper's own fields."""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from .config import ConfigError


@dataclass(frozen=True)
class Concern:
    say: str                        # what the user says to raise it
    answered_by: tuple[int, ...]    # indexes into the scenario's facts
    categories: tuple[str, ...] = ()  # behavior categories whose profiles raise it first


@dataclass(frozen=True)
class RuleUserSpec:
    concerns: tuple[Concern, ...]
    red_flags: tuple[str, ...] = ()
    decision_words: tuple[str, ...] = ()
    polite_words: tuple[str, ...] = ("thank", "thanks", "please", "sorry", "appreciate")
    ready_line: str = "Alright, that sounds fair. What happens next?"
    idle_line: str = "Anything else?"
    objection: str = "Hold on."
    endings: dict[str, str] = field(default_factory=lambda: {
        "accept": "Alright, go ahead.", "refuse": "No, I'm not interested. Goodbye.",
        "hangup": "I don't have time for this. (hangs up)"})
    answer_words: int = 2           # distinctive words of a fact an answer must use
    salad_concerns: int = 3         # answering this many concerns in one turn is a keyword salad
    max_words: int = 60             # longer turns earn nothing
    polite_credits: int = 2         # politeness raises emotion at most this often per call


_SCALARS = {"ready_line": str, "idle_line": str, "objection": str, "answer_words": int, "salad_concerns": int,
            "max_words": int, "polite_credits": int}
_LISTS = ("red_flags", "decision_words", "polite_words")


def load_rule_user(tree: Any, n_facts: int, categories: Collection[str], where: str) -> RuleUserSpec:
    """Validate a scenario's `rule_user` mapping; errors name the file and the field."""
    key = "rule_user"
    if not isinstance(tree, dict):
        raise ConfigError(f"{where}: field '{key}' must be a mapping")
    unknown = set(tree) - {"concerns", "endings", *_SCALARS, *_LISTS}
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)} in '{key}'")
    items = tree.get("concerns")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: field '{key}.concerns' must be a non-empty list")
    concerns = []
    for i, item in enumerate(items):
        at = f"{key}.concerns[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("say"), str) or not item["say"].strip():
            raise ConfigError(f"{where}: field '{at}.say' must be the text the user says")
        facts = item.get("answered_by")
        if (not isinstance(facts, list) or not facts
                or not all(isinstance(f, int) and not isinstance(f, bool) and 0 <= f < n_facts for f in facts)):
            raise ConfigError(f"{where}: field '{at}.answered_by' must list fact indexes 0..{n_facts - 1}")
        cats = item.get("categories", [])
        if not isinstance(cats, list) or any(c not in categories for c in cats):
            raise ConfigError(f"{where}: field '{at}.categories' must list known behavior categories "
                              f"(known: {sorted(categories)})")
        concerns.append(Concern(item["say"].strip(), tuple(facts), tuple(cats)))
    kwargs: dict[str, Any] = {"concerns": tuple(concerns)}
    for name, kind in _SCALARS.items():
        if name in tree:
            value = tree[name]
            if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 1):
                what = "positive integer" if kind is int else "string"
                raise ConfigError(f"{where}: field '{key}.{name}' must be a {what}")
            kwargs[name] = value
    for name in _LISTS:
        if name in tree:
            value = tree[name]
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ConfigError(f"{where}: field '{key}.{name}' must be a list of phrases")
            kwargs[name] = tuple(value)
    if "endings" in tree:
        endings = tree["endings"]
        if not isinstance(endings, dict) or set(endings) != {"accept", "refuse", "hangup"} \
                or not all(isinstance(v, str) for v in endings.values()):
            raise ConfigError(f"{where}: field '{key}.endings' must give the words of accept, refuse and hangup")
        kwargs["endings"] = dict(endings)
    return RuleUserSpec(**kwargs)
