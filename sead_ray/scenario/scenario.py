"""Scenario: everything domain-specific, loaded from one YAML file.

A scenario holds the agent's SOP and facts, the task objective, the explicit outcome semantics
(which user status counts as success), the state schema, the behavior library and the consistency
rules. A new domain is a new scenario file; no code changes.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional, Union

from sead_ray.core.config import parse_yaml
from sead_ray.core.jsonl import read_text
from sead_ray.core.typed_load import ConfigError, build, check, option
from sead_ray.scenario.guards import StatusGuard
from sead_ray.scenario.rule_user_section import RuleUserSpec, load_rule_user
from sead_ray.scenario.state import Dimension, State, StateSchema

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
    status_guards: dict[str, StatusGuard] = field(default_factory=dict)   # user.status_guards (guards.py)
    # The words prompts use for the two parties and the medium (every domain word comes from here).
    agent_title: str = "agent"       # how the user's side names the agent, e.g. "caller"
    user_title: str = "user"         # how the agent's side names the user, e.g. "owner"
    channel: str = "conversation"    # e.g. "phone call", "chat"
    rule_user: Optional[RuleUserSpec] = None   # what the `rule` simulator knows of the domain (rule_user_section.py)
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

    def user_set_names(self, user_set: str = "") -> list[str]:
        """`user_set` read as the config writes it: '' (the whole grid), one set, or several joined by commas
        ("soft,hard")."""
        names = [name.strip() for name in user_set.split(",") if name.strip()]
        unknown = [name for name in names if name not in self.user_sets]
        if unknown:
            raise ConfigError(f"{self.source}: no user set {unknown[0]!r} (the scenario declares "
                              f"{sorted(self.user_sets) or 'none'} under 'user_sets')")
        return names

    def user_set_of(self, state: State, user_set: str) -> Optional[UserSet]:
        """The first of the named sets that holds `state` (None: no set named, or none holds it)."""
        return next((self.user_sets[n] for n in self.user_set_names(user_set)
                     if self.user_sets[n].contains(self.schema, state)), None)

    def allowed_states(self, user_set: str = "") -> list[State]:
        """The grid's consistent states (those of the named user sets, when named)."""
        names = self.user_set_names(user_set)
        return [s for s in self.schema.grid() if self.state_allowed(s)
                and (not names or any(self.user_sets[n].contains(self.schema, s) for n in names))]


# --------------------------------------------------------------------------- the file's sections

Range = Union[int, tuple[int, int]]   # a level, or [low, high]


@dataclass
class AgentSection:
    role: str = option(nonempty=True)
    sop: list[str] = option(nonempty=True)
    facts: list[str] = option(nonempty=True)
    title: str = option("agent", nonempty=True)   # how the user's side names the agent


@dataclass
class OutcomeSection:
    outcome: Literal["success", "failure"] = option()
    meaning: str = option(nonempty=True)


@dataclass
class TaskSection:
    objective: str = option(nonempty=True)
    outcomes: dict[str, OutcomeSection] = option()   # accept, refuse, hangup
    channel: str = option("conversation", nonempty=True)
    call_opening: str = "(The call connects.)"


@dataclass
class UserSection:
    persona: str = option(nonempty=True)
    title: str = option("user", nonempty=True)   # how the agent's side names the user
    status_guards: dict[str, StatusGuard] = option({})


@dataclass
class RuleSection:
    when: dict[str, Range] = option(nonempty=True)
    name: str = ""
    reason: str = ""
    behavior_categories: list[str] = option([])


@dataclass
class ConsistencySection:
    max_behaviors_per_category: int = option(1, 1)
    rules: list[RuleSection] = option([])


@dataclass
class UserSetSection:
    states: dict[str, Range] = option(nonempty=True)
    description: str = ""
    behaviors: Range = (1, 3)   # behaviors per profile: a count or [min, max]


@dataclass
class ScenarioFile:
    """A scenario file as written (typed_load checks every key); `load_scenario` checks it across sections."""
    name: str = option(nonempty=True)
    agent: AgentSection = option()
    task: TaskSection = option()
    user: UserSection = option()
    state_schema: list[Dimension] = option(nonempty=True)
    behaviors: dict[str, Any] = option(nonempty=True)   # {file: PATH} or {category: [behavior, ...]}
    description: str = ""
    consistency: ConsistencySection = option(ConsistencySection())
    user_sets: dict[str, UserSetSection] = option({})
    rule_user: Optional[RuleUserSpec] = None   # what the `rule` simulator knows of the domain (rule_user_section.py)


# --------------------------------------------------------------------------- loading

_CATEGORY_PREFIX = re.compile(r"^\s*\d+\s*\.\s*")


def _load_behavior_library(spec: dict, base: Path, where: str) -> list[Behavior]:
    """`behaviors` is either {file: PATH} (PATH relative to the scenario file, or `package:NAME` for
    package data) or an inline mapping category -> [behavior, ...]."""
    data = spec
    if set(spec) == {"file"}:
        ref = check(spec["file"], str, "behaviors.file", where)
        try:
            if ref.startswith("package:"):
                text = resources.files("sead_ray").joinpath("data", ref[len("package:"):]).read_text("utf-8")
            else:
                text = (base / ref).read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{where}: behaviors.file = {ref!r} cannot be read: {exc}") from None
        if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), dict):
            data = next(iter(data.values()))  # the SEAD file wraps categories in one top-level key
        where = f"{where} (behaviors.file {ref})"
    library = check(data, dict[str, list[str]], "behaviors", where, {"nonempty": True})
    out, seen = [], set()
    for raw_cat, items in library.items():
        cat = _CATEGORY_PREFIX.sub("", str(raw_cat)).strip()
        for text in items:
            text = text.strip()
            if text in seen:
                raise ConfigError(f"{where}: behavior listed twice: {text!r}")
            seen.add(text)
            out.append(Behavior(cat, text))
    return out


def _check_schema(dims: list[Dimension], where: str) -> StateSchema:
    for i, dim in enumerate(dims):
        if len(dim.levels) < 2:
            raise ConfigError(f"{where}: state_schema[{i}].levels needs at least 2 levels")
    names = [d.name for d in dims]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: state_schema repeats a dimension name: {names}")
    size = math.prod(len(d.levels) for d in dims)
    if size > MAX_GRID_STATES:
        raise ConfigError(f"{where}: state_schema spans {size:,} states (the product of its level "
                          f"counts); at most {MAX_GRID_STATES:,} are supported")
    return StateSchema(tuple(dims))


def _known_dimensions(dims: Iterable[str], schema: StateSchema, key: str, where: str) -> None:
    for dim in dims:
        if dim not in schema.names:
            raise ConfigError(f"{where}: {key} names unknown dimension '{dim}' (schema has {list(schema.names)})")


def _ranges(tree: dict[str, Range], schema: StateSchema, key: str, where: str) -> dict[str, tuple[int, int]]:
    """{dimension: level or [low, high]} -> {dimension: (low, high)}."""
    _known_dimensions(tree, schema, key, where)
    return {dim: _range(value, f"{key}.{dim}", where) for dim, value in tree.items()}


def _range(value: Range, key: str, where: str, lowest: int = 0) -> tuple[int, int]:
    low, high = (value, value) if isinstance(value, int) else value
    if not lowest <= low <= high:
        raise ConfigError(f"{where}: {key} must be a level or [low, high] with {lowest} <= low <= high, got {value!r}")
    return low, high


def _check_guards(guards: dict[str, StatusGuard], schema: StateSchema, where: str) -> dict[str, StatusGuard]:
    for status, guard in guards.items():
        key = f"user.status_guards.{status}"
        if status not in ("accept", "refuse", "hangup"):
            raise ConfigError(f"{where}: {key}: a guard is for accept, refuse or hangup")
        if not guard.at_least and not guard.at_most:
            raise ConfigError(f"{where}: {key} must have at_least and/or at_most")
        for side in ("at_least", "at_most"):
            _known_dimensions(getattr(guard, side), schema, f"{key}.{side}", where)
            for dim, level in getattr(guard, side).items():
                top = schema.dimensions[schema.names.index(dim)].max_level
                if not 0 <= level <= top:
                    raise ConfigError(f"{where}: {key}.{side}.{dim} must be a level 0..{top}, got {level!r}")
    return guards


def _outcomes(task: TaskSection, where: str) -> tuple[dict[str, str], dict[str, str]]:
    unknown = sorted(set(task.outcomes) - {"accept", "refuse", "hangup"})
    missing = [s for s in ("accept", "refuse", "hangup") if s not in task.outcomes]
    if unknown or missing:
        raise ConfigError(f"{where}: task.outcomes.{(unknown or missing)[0]}: task.outcomes has exactly accept, refuse "
                          "and hangup, each with outcome: success|failure and meaning: <text>")
    if not any(o.outcome == "success" for o in task.outcomes.values()):
        raise ConfigError(f"{where}: task.outcomes: no status counts as success")
    return ({status: o.outcome for status, o in task.outcomes.items()},
            {"continue": f"the {task.channel.strip()} goes on", **{s: o.meaning for s, o in task.outcomes.items()}})


def load_scenario(path: str | Path) -> Scenario:
    """Read and check a scenario file; errors name the file and the key."""
    path = Path(path)
    where = str(path)
    tree = parse_yaml(read_text(path, ConfigError, "scenario file"), where)
    if not isinstance(tree, dict):
        raise ConfigError(f"{where}: a scenario file must be a mapping of keys")
    file = build(ScenarioFile, tree, "", where)
    schema = _check_schema(file.state_schema, where)
    behaviors = _load_behavior_library(file.behaviors, path.parent, where)
    categories = {b.category for b in behaviors}
    rules = []
    for i, rule in enumerate(file.consistency.rules):
        key = f"consistency.rules[{i}]"
        if any(c not in categories for c in rule.behavior_categories):
            raise ConfigError(f"{where}: {key}.behavior_categories must list known categories (known: {sorted(categories)})")
        rules.append(ConsistencyRule(rule.name or f"rule_{i}", rule.reason, _ranges(rule.when, schema, f"{key}.when", where),
                                     tuple(rule.behavior_categories)))
    user_sets = {name: UserSet(name, spec.description, _ranges(spec.states, schema, f"user_sets.{name}.states", where),
                               _range(spec.behaviors, f"user_sets.{name}.behaviors", where))
                 for name, spec in file.user_sets.items()}
    agent, task, user = file.agent, file.task, file.user
    outcome_of_status, status_meaning = _outcomes(task, where)
    scenario = Scenario(
        name=file.name, description=file.description.strip(), agent_role=agent.role.strip(), sop=agent.sop,
        facts=agent.facts, objective=task.objective.strip(), user_persona=user.persona.strip(),
        call_opening=task.call_opening, outcome_of_status=outcome_of_status, status_meaning=status_meaning,
        schema=schema, behaviors=behaviors, rules=rules,
        max_behaviors_per_category=file.consistency.max_behaviors_per_category,
        status_guards=_check_guards(user.status_guards, schema, where), agent_title=agent.title.strip(),
        user_title=user.title.strip(), channel=task.channel.strip(),
        rule_user=(load_rule_user(file.rule_user, agent.facts, categories, {b.text for b in behaviors}, where)
                   if file.rule_user is not None else None),
        user_sets=user_sets, source=str(path.resolve()))
    if not scenario.allowed_states():
        raise ConfigError(f"{where}: consistency.rules forbid every state of the grid")
    for name in scenario.user_sets:
        if not scenario.allowed_states(name):
            raise ConfigError(f"{where}: user_sets.{name}.states holds no state the consistency rules allow")
    return scenario
