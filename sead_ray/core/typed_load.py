"""YAML data into dataclasses, checked: the run config's sections and the scenario file's.

A field without a default is required. Scalars, literals, unions, `list[T]`, `tuple[T, ...]`,
`tuple[A, B]`, `dict[str, T]` and nested dataclasses are checked element by element, and every error names
the file and the dotted key: `FILE: task.outcomes.accept.outcome = 'yes' is not one of [...]`. A field's
metadata (`option`) bounds numbers, refuses empty strings and collections, or reads a lone string as a
list of one. What depends on other keys (a dimension the schema names, a fact index) is checked by the
caller after the build, in the same `FILE: key ...` form.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from typing import Any, Literal, Union

MISSING = dataclasses.MISSING


class ConfigError(ValueError):
    """A configuration or scenario file is invalid; the message names the key and the file."""


def option(default: Any = MISSING, lo: float | None = None, hi: float | None = None, doc: str = "", *,
           nonempty: bool = False, one_or_many: bool = False, internal: bool = False) -> Any:
    """A dataclass field with what the loader checks: numbers within [lo, hi], `nonempty` strings and
    collections, `one_or_many`: a lone string where a list of strings is expected (also as a mapping's
    values). No default: required. `internal`: set by the program, never read from a file."""
    meta = {"lo": lo, "hi": hi, "doc": doc, "nonempty": nonempty, "one_or_many": one_or_many, "internal": internal}
    if default is MISSING:
        return dataclasses.field(metadata=meta)
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        # a fresh deep copy per instance (asdict would turn nested sections into plain dicts)
        return dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def build(cls: type, data: Any, prefix: str, where: str) -> Any:
    """`cls(**data)` with every field checked; `prefix` is the dotted key of `data` in its file."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {prefix or 'the file'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("internal")}
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        raise ConfigError(f"{where}: unknown key '{_join(prefix, unknown[0])}' (known here: {', '.join(sorted(fields))})")
    for name, f in fields.items():
        if name not in data and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{where}: missing required key '{_join(prefix, name)}'")
    return cls(**{name: check(value, hints[name], _join(prefix, name), where, fields[name].metadata)
                  for name, value in data.items()})


def _join(prefix: str, name: Any) -> str:
    return f"{prefix}.{name}" if prefix else str(name)


def check(value: Any, tp: Any, key: str, where: str, meta: typing.Mapping = types.MappingProxyType({})) -> Any:
    """`value` as type `tp` (converted where YAML reads loosely), or ConfigError naming `key`."""
    value = _check_type(value, tp, key, where, meta)
    lo, hi = meta.get("lo"), meta.get("hi")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (
            lo is not None and value < lo or hi is not None and value > hi):
        raise ConfigError(f"{where}: {key} = {value} is out of range [{lo}, {hi}]")
    if meta.get("nonempty") and isinstance(value, (str, list, tuple, dict)) and not (
            value.strip() if isinstance(value, str) else value):
        raise ConfigError(f"{where}: {key} must not be empty")
    return value


def _check_type(value: Any, tp: Any, key: str, where: str, meta: typing.Mapping) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, key, where)
    if origin is Literal:
        if value is False and "off" in args:
            value = "off"   # YAML 1.1 reads a bare `off` (e.g. `curriculum.mode: off`) as false
        if isinstance(value, bool) or value not in args:
            raise ConfigError(f"{where}: {key} = {value!r} is not one of {list(args)}")
        return value
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return None
        if len(options) == 1:
            return check(value, options[0], key, where, meta)
        errors = []
        for option_type in options:
            try:
                return check(value, option_type, key, where, meta)
            except ConfigError as exc:
                errors.append(str(exc).removeprefix(f"{where}: "))
        raise ConfigError(f"{where}: {key} = {value!r} has the wrong type ({' or '.join(errors)})")
    if origin in (list, tuple):
        if meta.get("one_or_many") and isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: {key} must be a list, got {value!r}")
        fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)
        if fixed and len(value) != len(args):
            raise ConfigError(f"{where}: {key} must be a list of {len(args)}, got {value!r}")
        items = [check(v, args[i] if fixed else args[0], f"{key}[{i}]", where, _ELEMENT) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        key_type, value_type = args
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {key} must be a mapping, got {value!r}")
        element = {**_ELEMENT, "one_or_many": meta.get("one_or_many", False)}
        return {check(k, key_type, f"{key} (a key)", where): check(v, value_type, f"{key}.{k}", where, element)
                for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads `1e-6` (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
        if not math.isfinite(value):   # NaN passes every range check: refuse it here, with inf
            raise ConfigError(f"{where}: {key} must be a finite number, got {value}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string, got {value!r}")
        return value
    if tp is Any:
        return value
    raise ConfigError(f"{where}: {key}: unsupported type {tp}")


# the elements of a collection: no range of their own, no empty strings (a list of phrases, of levels)
_ELEMENT = types.MappingProxyType({"nonempty": True})
