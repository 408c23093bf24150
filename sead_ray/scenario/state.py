"""User state and the initial-state grid, both driven by the scenario's state schema.

A state is a tuple of integer levels, one per dimension, in schema order (by default
cooperation 0..4, emotion 0..3, trust 0..5: 5 x 4 x 6 = 120 states).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

State = tuple[int, ...]


@dataclass(frozen=True)
class Dimension:
    name: str
    levels: tuple[str, ...]  # what each level means, level 0 first

    @property
    def max_level(self) -> int:
        return len(self.levels) - 1


@dataclass(frozen=True)
class StateSchema:
    dimensions: tuple[Dimension, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    @property
    def max_levels(self) -> tuple[int, ...]:
        return tuple(d.max_level for d in self.dimensions)

    @property
    def middle(self) -> State:
        """The middle level of every dimension (rounded down)."""
        return tuple(m // 2 for m in self.max_levels)

    def grid(self) -> list[State]:
        """Every combination of levels, in lexicographic order (deterministic)."""
        return list(itertools.product(*(range(len(d.levels)) for d in self.dimensions)))

    def to_dict(self, state: State) -> dict[str, int]:
        return dict(zip(self.names, (int(v) for v in state)))

    def from_mapping(self, values: Mapping[str, object], *, clamp: bool = False) -> State:
        """Read a state from a mapping with one integer per dimension.

        Raises ValueError naming the dimension when a value is missing, not an integer, or out of
        range (unless clamp, which pulls out-of-range integers to the nearest level).
        """
        out = []
        for dim in self.dimensions:
            if dim.name not in values:
                raise ValueError(f"missing state dimension '{dim.name}'")
            raw = values[dim.name]
            if isinstance(raw, bool):
                raise ValueError(f"state dimension '{dim.name}' must be an integer, got {raw!r}")
            if isinstance(raw, str) and raw.strip().lstrip("-").isdigit():
                raw = int(raw.strip())
            if isinstance(raw, float) and raw.is_integer():
                raw = int(raw)
            if not isinstance(raw, int):
                raise ValueError(f"state dimension '{dim.name}' must be an integer, got {raw!r}")
            if not 0 <= raw <= dim.max_level:
                if not clamp:
                    raise ValueError(f"state dimension '{dim.name}' = {raw} is outside 0..{dim.max_level}")
                raw = min(max(raw, 0), dim.max_level)
            out.append(raw)
        return tuple(out)

    def describe(self, state: State) -> str:
        """Human-readable state for prompts: 'cooperation 2/4 (neutral: ...)'."""
        parts = []
        for dim, level in zip(self.dimensions, state):
            parts.append(f"{dim.name} {level}/{dim.max_level} ({dim.levels[level]})")
        return "; ".join(parts)


def state_key(state: Iterable[int]) -> str:
    """Stable text key of a state for JSON files: '2-1-3'."""
    return "-".join(str(int(v)) for v in state)


def parse_state_key(key: str) -> State:
    return tuple(int(v) for v in key.split("-"))
