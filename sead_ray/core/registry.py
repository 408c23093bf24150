"""One registry per extension point: named implementations chosen by one config key.

A config value that names nothing registered is refused where the config is loaded (exit 2), with the
known names listed. Adding an implementation touches one file: the one that registers it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from sead_ray.core.typed_load import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, key: str, what: str):
        self.key, self.what = key, what       # the config key that chooses, what its values name
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.key}: {name!r} is registered twice")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """As a decorator: `@REWARDS.register("outcome")`."""
        return lambda item: self.add(name, item)

    def get(self, name: str, where: str = "") -> T:
        if name not in self._items:
            raise ConfigError(f"{where + ': ' if where else ''}{self.key} = {name!r} names no registered {self.what}; "
                              f"known: {', '.join(self.names())}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)
