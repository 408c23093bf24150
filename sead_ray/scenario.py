"""Scenario: everything domain-specific, loaded from one YAML file.

A scenario holds the agent's SOP and facts, the task objective, the explicit outcome semantics
(which user status counts as success), the state schema, the behavior library and the consistency
rules. A new domain is a new scenario file; no code changes.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import yaml

from .concerns import RuleUserSpec, load_rule_user
from .config import ConfigError, yaml_problem
from .jsonl import read_text
from .sim_rules import StatusGuard
from .state import Dimension, State, StateSchema

USER_STATUSES = ("continue", "accept", "refuse", "hangup")
MAX_GRID_STATES = 100_000   # the grid is enumerated (allowed states, curriculum tables): keep it in memory


@dataclass(frozen=True)
class Behavior:
    category: str
    text: str


@dataclass(frozen=True)
class ConsistencyRule:
    """A profile is inconsistent when its state lies inside every range of `when` and, if
    `behavior_categories` is set, it also has a behavior of one of those categories."""

    name: str
    reason: str
    when: Mapping[str, tuple[int, int]]
    behavior_categories: tuple[str, ...] = ()

    def state_matches(self, schema: StateSchema, state: State) -> bool:
        values = schema.to_dict(state)
        return all(lo <= values[dim] <= hi for dim, (lo, hi) in self.when.items())

    def forbids(self, schema: StateSchema, state: State, behaviors: tuple[Behavior, ...]) -> bool:
        if not self.state_matches(schema, state):
            return False
        if not self.behavior_categories:
            return True
        return any(b.category in self.behavior_categories for b in behaviors)


@dataclass(frozen=True)
class UserSet:
    """A named kind of user (MASP's soft and hard users): initial states inside `states`, and
    `behaviors` = (min, max) behaviors per profile."""
    name: str
    description: str
    states: Mapping[str, tuple[int, int]]
    behaviors: tuple[int, int] = (1, 3)

    def contains(self, schema: StateSchema, state: State) -> bool:
        values = schema.to_dict(state)
        return all(lo <= values[dim] <= hi for dim, (lo, hi) in self.states.items())


@dataclass
class Scenario:
    name: str
    description: str
    agent_role: str
    sop: list[str]
    facts: list[str]
    objective: str
    user_persona: str
    call_opening: str
    outcome_of_status: dict[str, str]  # accept/refuse/hangup -> success/failure
    status_meaning: dict[str, str]
    schema: StateSchema
    behaviors: list[Behavior]
    rules: list[ConsistencyRule] = field(default_factory=list)
    max_behaviors_per_category: int = 1
    status_guards: dict[str, StatusGuard] = field(default_factory=dict)   # user.status_guards (sim_rules.py)
    # The words prompts use for the two parties and the medium (every domain word comes from here).
    agent_title: str = "agent"       # how the user's side names the agent, e.g. "caller"
    user_title: str = "user"         # how the agent's side names the user, e.g. "owner"
    channel: str = "conversation"    # e.g. "phone call", "chat"
    rule_user: Optional[RuleUserSpec] = None   # what the `rule` simulator knows of the domain (concerns.py)
    user_sets: dict[str, UserSet] = field(default_factory=dict)
    source: str = "<inline>"

    @property
    def categories(self) -> list[str]:
        return sorted({b.category for b in self.behaviors})

    def state_allowed(self, state: State) -> bool:
        """False when a rule without behavior conditions forbids the state itself."""
        return not any(r.forbids(self.schema, state, ()) for r in self.rules if not r.behavior_categories)

    def violated_rules(self, state: State, behaviors: tuple[Behavior, ...]) -> list[ConsistencyRule]:
        broken = [r for r in self.rules if r.forbids(self.schema, state, behaviors)]
        return broken

    def allowed_states(self, user_set: str = "") -> list[State]:
        """The grid's consistent states (those of one user set when named)."""
        if user_set and user_set not in self.user_sets:
            raise ConfigError(f"{self.source}: no user set {user_set!r} (the scenario declares "
                              f"{sorted(self.user_sets) or 'none'} under 'user_sets')")
        inside = self.user_sets[user_set].contains if user_set else (lambda schema, state: True)
        return [s for s in self.schema.grid() if self.state_allowed(s) and inside(self.schema, s)]


# --------------------------------------------------------------------------- loading

def _need(tree: Mapping, key: str, where: str, kind: type | tuple = str) -> Any:
    if key not in tree:
        raise ConfigError(f"{where}: missing required field '{key}'")
    value = tree[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}: field '{key}' must be a {names}, got {type(value).__name__}")
    return value


def _str_list(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{where}: field '{key}' must be a non-empty list of strings")
    return list(value)


_CATEGORY_PREFIX = re.compile(r"^\s*\d+\s*\.\s*")


def _load_behavior_library(spec: Any, base: Path, where: str) -> list[Behavior]:
    """`behaviors` is either {file: PATH} (PATH relative to the scenario file, or
    `package:NAME` for package data) or an inline mapping category -> [behavior, ...]."""
    if isinstance(spec, dict) and set(spec) == {"file"}:
        ref = spec["file"]
        if not isinstance(ref, str):
            raise ConfigError(f"{where}: field 'behaviors.file' must be a string")
        try:
            if ref.startswith("package:"):
                text = resources.files("sead_ray").joinpath("data", ref[len("package:"):]).read_text("utf-8")
            else:
                text = (base / ref).read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{where}: field 'behaviors.file' = {ref!r} cannot be read: {exc}") from None
        if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), dict):
            data = next(iter(data.values()))  # the SEAD file wraps categories in one top-level key
        where = f"{where} (behaviors.file {ref})"
    else:
        data = spec
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{where}: field 'behaviors' must map categories to lists of behaviors")
    out, seen = [], set()
    for raw_cat, items in data.items():
        cat = _CATEGORY_PREFIX.sub("", str(raw_cat)).strip()
        for text in _str_list(items, f"behaviors.{raw_cat}", where):
            text = text.strip()
            if text in seen:
                raise ConfigError(f"{where}: behavior listed twice: {text!r}")
            seen.add(text)
            out.append(Behavior(cat, text))
    return out


def _load_schema(items: Any, where: str) -> StateSchema:
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: field 'state_schema' must be a non-empty list of dimensions")
    dims = []
    for i, item in enumerate(items):
        w = f"state_schema[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: field '{w}' must be a mapping with 'name' and 'levels'")
        name = _need(item, "name", f"{where}: {w}")
        levels = _str_list(item.get("levels"), f"{w}.levels", where)
        if len(levels) < 2:
            raise ConfigError(f"{where}: field '{w}.levels' needs at least 2 levels")
        dims.append(Dimension(name, tuple(levels)))
    names = [d.name for d in dims]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: field 'state_schema' repeats a dimension name: {names}")
    size = math.prod(len(d.levels) for d in dims)
    if size > MAX_GRID_STATES:
        raise ConfigError(f"{where}: field 'state_schema' spans {size:,} states (the product of its level "
                          f"counts); at most {MAX_GRID_STATES:,} are supported")
    return StateSchema(tuple(dims))


def _load_ranges(tree: Any, schema: StateSchema, key: str, where: str) -> dict[str, tuple[int, int]]:
    """{dimension: level or [low, high]} -> {dimension: (low, high)}."""
    if not isinstance(tree, dict) or not tree:
        raise ConfigError(f"{where}: field '{key}' must map dimensions to [low, high]")
    ranges = {}
    for dim, rng in tree.items():
        if dim not in schema.names:
            raise ConfigError(f"{where}: field '{key}' names unknown dimension '{dim}' "
                              f"(schema has {list(schema.names)})")
        ranges[dim] = _int_range(rng)
        if ranges[dim] is None:
            raise ConfigError(f"{where}: field '{key}.{dim}' must be a level or [low, high], got {rng!r}")
    return ranges


def _int_range(value: Any) -> Optional[tuple[int, int]]:
    """An integer `n` as (n, n), a list [low, high] with low <= high as (low, high); None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value, value]
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value) or value[0] > value[1]):
        return None
    return value[0], value[1]


def _load_user_sets(tree: Any, schema: StateSchema, where: str) -> dict[str, UserSet]:
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{where}: field 'user_sets' must map a set name to {{states: ..., behaviors: ...}}")
    sets = {}
    for name, spec in tree.items():
        key = f"user_sets.{name}"
        if not isinstance(spec, dict) or set(spec) - {"description", "states", "behaviors"}:
            raise ConfigError(f"{where}: field '{key}' may have description, states and behaviors only")
        counts = _int_range(spec.get("behaviors", [1, 3]))
        if counts is None or counts[0] < 0:
            raise ConfigError(f"{where}: field '{key}.behaviors' must be a count or [min, max] of behaviors")
        sets[str(name)] = UserSet(str(name), str(spec.get("description", "")),
                                  _load_ranges(spec.get("states"), schema, f"{key}.states", where), counts)
    return sets


def _load_rules(items: Any, schema: StateSchema, categories: set[str], where: str) -> list[ConsistencyRule]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise ConfigError(f"{where}: field 'consistency.rules' must be a list")
    rules = []
    for i, item in enumerate(items):
        w = f"consistency.rules[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: field '{w}' must be a mapping")
        unknown = set(item) - {"name", "reason", "when", "behavior_categories"}
        if unknown:
            raise ConfigError(f"{where}: field '{w}' has unknown key(s) {sorted(unknown)}")
        when = _load_ranges(item.get("when"), schema, f"{w}.when", where)
        cats = item.get("behavior_categories", [])
        if not isinstance(cats, list) or any(c not in categories for c in cats):
            raise ConfigError(f"{where}: field '{w}.behavior_categories' must list known categories "
                              f"(known: {sorted(categories)})")
        rules.append(ConsistencyRule(str(item.get("name", f"rule_{i}")), str(item.get("reason", "")),
                                     when, tuple(cats)))
    return rules


def _load_guards(items: object, schema: StateSchema, where: str) -> dict[str, StatusGuard]:
    if items is None:
        return {}
    if not isinstance(items, dict):
        raise ConfigError(f"{where}: field 'user.status_guards' must map a status to {{at_least: ..., at_most: ...}}")
    guards = {}
    for status, spec in items.items():
        key = f"user.status_guards.{status}"
        if status not in ("accept", "refuse", "hangup"):
            raise ConfigError(f"{where}: field '{key}': a guard is for accept, refuse or hangup")
        if not isinstance(spec, dict) or not spec or set(spec) - {"at_least", "at_most"}:
            raise ConfigError(f"{where}: field '{key}' must have at_least and/or at_most")
        bounds = {}
        for side in ("at_least", "at_most"):
            levels = spec.get(side) or {}
            for dim, level in (levels.items() if isinstance(levels, dict) else [(None, None)]):
                if dim not in schema.names:
                    raise ConfigError(f"{where}: field '{key}.{side}' names unknown dimension {dim!r} "
                                      f"(schema has {list(schema.names)})")
                top = schema.dimensions[schema.names.index(dim)].max_level
                if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= top:
                    raise ConfigError(f"{where}: field '{key}.{side}.{dim}' must be a level 0..{top}, got {level!r}")
            bounds[side] = dict(levels)
        guards[status] = StatusGuard(**bounds)
    return guards


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; errors name the file and the field."""
    path = Path(path)
    where = str(path)
    try:
        tree = yaml.safe_load(read_text(path, ConfigError, "scenario file"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML{yaml_problem(exc)}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{where}: a scenario file must be a mapping of fields")
    known = {"name", "description", "agent", "task", "user", "state_schema", "behaviors", "consistency", "rule_user",
             "user_sets"}
    unknown = set(tree) - known
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)} (known: {sorted(known)})")

    agent = _need(tree, "agent", where, dict)
    task = _need(tree, "task", where, dict)
    user = _need(tree, "user", where, dict)
    schema = _load_schema(tree.get("state_schema"), where)
    behaviors = _load_behavior_library(_need(tree, "behaviors", where, (dict,)), path.parent, where)

    outcomes = _need(task, "outcomes", f"{where}: task", dict)
    channel = str(task.get("channel", "conversation")).strip()
    outcome_of_status, status_meaning = {}, {"continue": f"the {channel} goes on"}
    for status in ("accept", "refuse", "hangup"):
        spec = outcomes.get(status)
        if not isinstance(spec, dict) or spec.get("outcome") not in ("success", "failure") \
                or not isinstance(spec.get("meaning"), str):
            raise ConfigError(f"{where}: field 'task.outcomes.{status}' must have outcome: success|failure "
                              f"and meaning: <text>")
        outcome_of_status[status] = spec["outcome"]
        status_meaning[status] = spec["meaning"]
    if "success" not in outcome_of_status.values():
        raise ConfigError(f"{where}: field 'task.outcomes': no status counts as success")

    consistency = tree.get("consistency") or {}
    if not isinstance(consistency, dict):
        raise ConfigError(f"{where}: field 'consistency' must be a mapping")
    per_cat = consistency.get("max_behaviors_per_category", 1)
    if not isinstance(per_cat, int) or isinstance(per_cat, bool) or per_cat < 1:
        raise ConfigError(f"{where}: field 'consistency.max_behaviors_per_category' must be an integer >= 1")
    rules = _load_rules(consistency.get("rules"), schema, {b.category for b in behaviors}, where)

    facts = _str_list(agent.get("facts"), "agent.facts", where)
    rule_user = (load_rule_user(tree["rule_user"], facts, {b.category for b in behaviors}, {b.text for b in behaviors},
                                where)
                 if tree.get("rule_user") is not None else None)
    scenario = Scenario(
        name=_need(tree, "name", where),
        description=str(tree.get("description", "")).strip(),
        agent_role=_need(agent, "role", f"{where}: agent").strip(),
        sop=_str_list(agent.get("sop"), "agent.sop", where),
        facts=facts,
        objective=_need(task, "objective", f"{where}: task").strip(),
        user_persona=_need(user, "persona", f"{where}: user").strip(),
        call_opening=str(task.get("call_opening", "(The call connects.)")),
        outcome_of_status=outcome_of_status,
        status_meaning=status_meaning,
        schema=schema,
        behaviors=behaviors,
        rules=rules,
        max_behaviors_per_category=per_cat,
        status_guards=_load_guards(user.get("status_guards"), schema, where),
        agent_title=str(agent.get("title", "agent")).strip(),
        user_title=str(user.get("title", "user")).strip(),
        channel=channel,
        rule_user=rule_user,
        user_sets=_load_user_sets(tree.get("user_sets"), schema, where),
        source=str(path.resolve()),
    )
    if not scenario.allowed_states():
        raise ConfigError(f"{where}: field 'consistency.rules' forbids every state of the grid")
    for name in scenario.user_sets:
        if not scenario.allowed_states(name):
            raise ConfigError(f"{where}: field 'user_sets.{name}.states' holds no state the consistency rules allow")
    return scenario
