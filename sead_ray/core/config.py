"""Typed run configuration loaded from one YAML file, with `--set a.b=c` overrides.

Every key is a dataclass field (sead_ray.core.config_schema), loaded by sead_ray.core.typed_load: unknown keys,
wrong types and out-of-range values raise ConfigError naming the key and the file, which the CLI turns
into exit code 2; then the checks across keys.
"""
from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import yaml

from sead_ray.core.config_schema import EMBEDDED_MODEL, ConfigError, SeadConfig

__all__ = ["EMBEDDED_MODEL", "ConfigError", "SeadConfig", "config_to_dict", "dump_config", "load_config",
           "parse_overrides", "parse_yaml"]
from sead_ray.core.jsonl import read_text
from sead_ray.core.transports import WEIGHT_TRANSPORTS
from sead_ray.core.typed_load import build

log = logging.getLogger(__name__)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text as data, or ConfigError: not valid YAML (with its line), or a value Python refuses to
    build (an integer of more than 4,300 digits)."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML{_yaml_problem(exc)}") from None
    except ValueError as exc:
        raise ConfigError(f"{where}: a value cannot be read: {exc}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line, to follow "not valid YAML": ' at line L, column C: problem' (or ': problem')."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return (f" at line {mark.line + 1}, column {mark.column + 1}" if mark else "") + f": {problem}"


def _set_dotted(tree: dict, dotted: str, raw: str) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: '{k}' is not a section")
    node[keys[-1]] = parse_yaml(raw, f"--set {dotted}={raw[:40]}{'...' if len(raw) > 40 else ''}") if raw != "" else ""


# The one word of each role (issue 25): older spellings still load, with a warning.
RENAMED_KEYS = {"user_sim": "user", "placement.agent_policy": "placement.agent", "placement.user_sim": "placement.user"}


def _renamed(dotted: str, where: str) -> str:
    for old, new in RENAMED_KEYS.items():
        if dotted == old or dotted.startswith(old + "."):
            log.warning("%s: %s is now spelled %s (the old spelling still works)", where, old, new)
            return new + dotted[len(old):]
    return dotted


def _rename_old_keys(tree: dict, where: str) -> None:
    for old, new in RENAMED_KEYS.items():
        *path, old_key = old.split(".")
        node = tree
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or old_key not in node:
            continue
        new_key = new.split(".")[-1]
        if new_key in node:
            raise ConfigError(f"{where}: both {old} and {new} are given: {old} is the old spelling of {new}")
        node[new_key] = node.pop(old_key)
        _renamed(old, where)


def parse_overrides(overrides: list[str] | None) -> list[tuple[str, str]]:
    pairs = []
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. train.batch_size=4")
        key, raw = item.split("=", 1)
        if not all(part.strip() for part in key.split(".")):
            raise ConfigError(f"--set {item!r}: empty key, expected KEY=VALUE, e.g. train.batch_size=4")
        pairs.append((key.strip(), raw))
    return pairs


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> SeadConfig:
    """Load a YAML run config (or the defaults when path is None) and apply `--set` overrides."""
    tree: dict = {}
    where = "<defaults>"
    if path is not None:
        where = str(path)
        tree = parse_yaml(read_text(path, ConfigError, "config file"), where) or {}
        if not isinstance(tree, dict):
            raise ConfigError(f"{where}: the top level must be a mapping of keys")
        _rename_old_keys(tree, where)
    for key, raw in parse_overrides(overrides):
        _set_dotted(tree, _renamed(key, "--set"), raw)
    cfg = build(SeadConfig, tree, "", where + (" (with --set overrides)" if overrides else ""))
    cfg.source = str(Path(path).resolve()) if path is not None else "<defaults>"
    cross_checks(cfg, where)
    return cfg


# --------------------------------------------------------------------------- checks across keys

def cross_checks(cfg: SeadConfig, where: str) -> None:
    cur = cfg.curriculum
    if cur.hard_below > cur.easy_above:
        raise ConfigError(f"{where}: curriculum.hard_below ({cur.hard_below}) must not exceed "
                          f"curriculum.easy_above ({cur.easy_above})")
    if cur.min_behaviors > cur.max_behaviors:
        raise ConfigError(f"{where}: curriculum.min_behaviors ({cur.min_behaviors}) must not exceed "
                          f"curriculum.max_behaviors ({cur.max_behaviors})")
    if any(d < 0 for d in cur.depths) or len(set(cur.depths)) < len(cur.depths) or (cur.depth != "off" and not cur.depths):
        raise ConfigError(f"{where}: curriculum.depths must be distinct depths >= 0 (turns before the honest script's "
                          f"final ask; the cold call is always drawn beside them), got {list(cur.depths)}")
    if any(isinstance(d, int) and d < 0 for d in cfg.train.eval_depths) or not cfg.train.eval_depths:
        raise ConfigError(f"{where}: train.eval_depths must list 'cold' and/or depths >= 0, got "
                          f"{list(cfg.train.eval_depths)}")
    if isinstance(cfg.user.engines, int) and cfg.user.engines < 1:
        raise ConfigError(f"{where}: user.engines must be >= 1 or 'auto', got {cfg.user.engines}")
    for table in ("usd_per_mtok_in", "usd_per_mtok_out"):
        negative = {m: v for m, v in getattr(cfg.cost, table).items() if v < 0}
        if negative:
            raise ConfigError(f"{where}: cost.{table}: prices must be >= 0, got {negative}")
    if cfg.train.warm_start != "none" and not '{"reply": "'.startswith(cfg.dialogue.agent_prefill):
        raise ConfigError(f"{where}: train.warm_start = {cfg.train.warm_start} writes agent turns in the agent's format "
                          f"({{\"reply\": ..., \"estimate\": ...}}): dialogue.agent_prefill must be the start of it "
                          f"(the default, or ''), got {cfg.dialogue.agent_prefill!r}")
    if cfg.user.train and cfg.placement.colocate:
        raise ConfigError(f"{where}: user.train = true needs placement.colocate = false (the simulator's trainer "
                          "has GPUs of its own)")
    # vLLM's attention kernels take blocks of a multiple of 32 tokens on CPU, of 16 on CUDA
    on_cpu = cfg.placement.agent.gpus == 0 or (cfg.user.backend == "vllm" and cfg.placement.user.gpus == 0)
    if cfg.engine.block_size % (32 if on_cpu else 16):
        raise ConfigError(f"{where}: engine.block_size must be a multiple of {32 if on_cpu else 16} with engines on "
                          f"{'CPU' if on_cpu else 'CUDA'} (or 0 for vLLM's default), got {cfg.engine.block_size}")
    _check_engines(cfg, where)
    _check_transport(cfg, where)


def _check_engines(cfg: SeadConfig, where: str) -> None:
    """An engine with tensor parallelism T needs T GPUs in its bundle (vLLM starts T workers there)."""
    for role in ("agent", "user"):
        tp, gpus = getattr(cfg, role).tensor_parallel_size, getattr(cfg.placement, role).gpus
        if (gpus > 0 or tp > 1) and gpus != tp:
            raise ConfigError(f"{where}: {role}.tensor_parallel_size = {tp} needs placement.{role}.gpus = {tp} "
                              f"(got {gpus:g})")


def _check_transport(cfg: SeadConfig, where: str) -> None:
    """What the config alone says about the weight transport (the cluster is checked at start)."""
    transport, p = cfg.weight_sync.transport, cfg.placement
    needs = WEIGHT_TRANSPORTS.get(transport, where)
    if needs.cuda and not (p.trainer.gpus > 0 and p.agent.gpus > 0):
        raise ConfigError(f"{where}: weight_sync.transport = {transport} needs CUDA on both ends, but "
                          f"placement.trainer.gpus = {p.trainer.gpus:g} and placement.agent.gpus = "
                          f"{p.agent.gpus:g}; use gloo, object_store or shm on CPU")
    if p.colocate and (p.trainer.gpus > 0 or p.agent.gpus > 0 or p.user.gpus > 0):
        raise ConfigError(f"{where}: placement.colocate = true is not supported on GPUs: Ray Train places the trainer "
                          "ranks in a placement group of its own, which never shares a GPU with an engine; use "
                          "placement.colocate = false and weight_sync.transport = nccl")


# --------------------------------------------------------------------------- writing

def config_to_dict(cfg: SeadConfig) -> dict:
    """The config as plain data, loadable again: paths made absolute, the loader's `source` dropped."""
    tree = dataclasses.asdict(cfg)
    tree.pop("source")
    tree["scenario"] = str(cfg.resolve_path(cfg.scenario))
    return tree


def dump_config(cfg: SeadConfig, path: str | Path) -> None:
    """Write the resolved config (every default filled in) so a run can be reproduced."""
    Path(path).write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
