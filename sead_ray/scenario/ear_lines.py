"""A scenario's ear lines (`<scenario>.ear_lines.yaml` beside its file): caller lines written to test how the
rule user hears, never read by the user itself. The adversarial battery's paraphrase classes speak them
(sead_ray.agent.scripted) and benchmarks/ear_accuracy.py scores each ear on them, clause by clause.

    facts:          one entry per agent fact, in order: paraphrase (honest, other words), terse (honest, 2-5
                    words), lies (in fresh words) and, optionally, swaps (welcome lies said in place of the answer
                    to the fact's question; the lies are read that way too)
    identity, offer, ask, pressure, credentials, payment, reassurance, small_talk
    clean           honest lines that name cards, codes, payment or deadlines only to deny them
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from sead_ray.core.config import parse_yaml
from sead_ray.core.jsonl import read_text
from sead_ray.core.typed_load import ConfigError, build, option


@dataclass(frozen=True)
class FactLines:
    paraphrase: tuple[str, ...] = option(nonempty=True)
    terse: tuple[str, ...] = option(nonempty=True)
    lies: tuple[str, ...] = option(nonempty=True)
    swaps: tuple[str, ...] = ()


@dataclass(frozen=True)
class EarLines:
    facts: tuple[FactLines, ...] = option(nonempty=True)
    identity: tuple[str, ...] = option(nonempty=True)
    offer: tuple[str, ...] = option(nonempty=True)
    ask: tuple[str, ...] = option(nonempty=True)
    pressure: tuple[str, ...] = option(nonempty=True)
    credentials: tuple[str, ...] = option(nonempty=True)
    payment: tuple[str, ...] = option(nonempty=True)
    reassurance: tuple[str, ...] = option(nonempty=True)
    small_talk: tuple[str, ...] = option(nonempty=True)
    clean: tuple[str, ...] = option(nonempty=True)

    def labelled(self) -> list[tuple[str, str, int]]:
        """Every line as (text, label, fact): label fact / terse / lie (about fact k), swap (a lie or swap about fact
        k, heard as the answer to its question), or the list's name."""
        out = [(t, kind, k) for k, f in enumerate(self.facts)
               for kind, lines in (("fact", f.paraphrase), ("terse", f.terse), ("lie", f.lies),
                                   ("swap", (*f.lies, *f.swaps))) for t in lines]
        for label in ("identity", "offer", "ask", "pressure", "credentials", "payment", "reassurance", "small_talk",
                      "clean"):
            out += [(t, label, -1) for t in getattr(self, label)]
        return out


def ear_lines_path(scenario_source: str) -> Path:
    path = Path(scenario_source)
    return path.with_name(path.name.removesuffix(".yaml") + ".ear_lines.yaml")


def load_ear_lines(scenario_source: str, n_facts: int, folder: Optional[str] = None) -> Optional[EarLines]:
    """The lines beside the scenario file (or in `folder`, under the same name), or None when there are none
    (ConfigError when they do not load). Read once per version of the file (every scripted call of the battery asks)."""
    path = ear_lines_path(scenario_source)
    path = Path(folder) / path.name if folder else path
    if not path.exists():
        return None
    key = (str(path), path.stat().st_mtime_ns, n_facts)
    if key not in _LOADED:
        _LOADED[key] = _load(path, scenario_source, n_facts)
    return _LOADED[key]


_LOADED: dict[tuple[str, int, int], EarLines] = {}


def _load(path: Path, scenario_source: str, n_facts: int) -> EarLines:
    lines = build(EarLines, parse_yaml(read_text(path, ConfigError, "ear lines file"), str(path)), "", str(path))
    if len(lines.facts) != n_facts:
        raise ConfigError(f"{path}: facts must have one entry per agent fact of {scenario_source} ({n_facts}), "
                          f"got {len(lines.facts)}")
    return lines
