"""What the `sead-ray` commands read and write before any work: the config and scenario, output paths
checked up front, the evaluation profile set. Bad input raises UsageError (exit code 2)."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Optional


class UsageError(ValueError):
    """Bad input from the user (exit code 2)."""


def load(config_path: Optional[str], overrides: Sequence[str]):
    from sead_ray.core.config import ConfigError, load_config
    from sead_ray.scenario.scenario import load_scenario
    cfg = load_config(config_path, list(overrides))
    check_extension_points(cfg)
    path = cfg.resolve_path(cfg.scenario)
    if not path.exists() and Path(cfg.scenario).expanduser().is_file():   # written from where the command runs
        folder = Path(cfg.source).parent
        raise ConfigError(f"{cfg.source}: scenario {cfg.scenario!r} is read from the config's folder ({folder}), "
                          f"where it is not; the file you mean is "
                          f"scenario={os.path.relpath(Path(cfg.scenario).expanduser().resolve(), folder.resolve())}")
    scenario = load_scenario(path)
    if cfg.user.backend == "rule" and scenario.rule_user is None:
        raise ConfigError(f"{scenario.source}: user.backend is 'rule', and the rule simulator is written from the "
                          "scenario's 'rule_user' section, which this file lacks (see configs/scenarios/"
                          "restaurant_promotion.yaml), or set user.backend=vllm")
    if scenario.rule_user is not None:   # its honest opening and ask must read as such to the rule user
        from sead_ray.user.rule.lexicon import check_hearing
        check_hearing(scenario.rule_user, scenario.facts, str(scenario.source))
    return cfg, scenario


def check_extension_points(cfg) -> None:
    """Each config value that chooses a plug-in names a registered one (the registries sit above the
    config's package, so the config's own checks cannot see them): ConfigError (exit 2) with the known names."""
    from sead_ray.core.config import ConfigError
    from sead_ray.training.grpo import ADVANTAGE_ESTIMATORS
    from sead_ray.training.rewards import READS_AGENDA, REWARDS
    from sead_ray.user.rule.ears import EARS
    from sead_ray.user.simulators import USER_BACKENDS
    where = cfg.source
    REWARDS.get(cfg.train.reward, where)
    EARS.get(cfg.user.rule.ear, where)
    ADVANTAGE_ESTIMATORS.get(cfg.train.advantage_mode, where)
    simulator = USER_BACKENDS.get(cfg.user.backend, where)
    if cfg.train.reward in READS_AGENDA and not simulator.agenda:
        raise ConfigError(f"{where}: train.reward = {cfg.train.reward} reads the simulator's agenda (who called, the "
                          f"offer, the concerns resolved), which user.backend = {cfg.user.backend} does not report: "
                          f"use one that does ({', '.join(n for n in USER_BACKENDS if USER_BACKENDS.get(n).agenda)})")
    if not simulator.on_engine and cfg.user.train:
        raise ConfigError(f"{where}: user.train = true trains the simulator's model: it needs user.backend = "
                          f"vllm (got {cfg.user.backend})")


def check_out(path: Path, kind: str, label: str = "--out") -> Path:
    """Refuse, before any work, an output that cannot be written: a FILE that is a folder, a DIR that is
    a file, or a place below a file or in a folder we may not write to."""
    if kind == "dir" and path.exists() and not path.is_dir():
        raise UsageError(f"{label} {path}: is an existing file, not a folder")
    if kind == "file" and path.is_dir():
        raise UsageError(f"{label} {path}: is a folder, not a file")
    existing = path if kind == "dir" else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{label} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{label} {path}: cannot write into {existing} (permission denied)")
    return path


def make_out_dir(path: Path, label: str = "--out") -> Path:
    try:
        check_out(path, "dir", label).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{label} {path}: cannot create the folder ({exc.strerror})") from None
    return path


def sample_profiles(cfg, scenario, n: int, seed: int) -> list:
    """N profiles as iteration 1 of a run with this config would draw them (the curriculum's mode,
    N_max, behaviors per profile and profile sampling all apply)."""
    from sead_ray.curriculum.controller import ProfileController
    from sead_ray.scenario.profiles import ProfileSamplingError
    try:
        return ProfileController(scenario, cfg.curriculum, seed).sample(n)
    except ProfileSamplingError as exc:
        raise UsageError(str(exc)) from None


def profiles_by_user_set(cfg, scenario, user_sets: Optional[str], n: int, seed: int) -> dict[str, list]:
    """N profiles from each named user set ("soft,hard"), or N from the config's draw when none is named."""
    from dataclasses import replace
    names = [s.strip() for s in (user_sets or "").split(",") if s.strip()]
    if not names:
        return {cfg.curriculum.user_set: sample_profiles(cfg, scenario, n, seed)}
    return {name: sample_profiles(replace(cfg, curriculum=replace(cfg.curriculum, user_set=name)), scenario, n, seed)
            for name in names}


def write_profiles(path: Path, profiles: list, scenario) -> None:
    from sead_ray.core.jsonl import write_jsonl
    write_jsonl(path, (p.to_json(scenario.schema) for p in profiles))


def read_profiles(path: str, scenario) -> list:
    from sead_ray.scenario.profiles import ProfileFileError
    from sead_ray.scenario.profiles import read_profiles as read
    try:
        return read(path, scenario)
    except ProfileFileError as exc:
        raise UsageError(str(exc)) from None


def evaluation_profiles(args, cfg, scenario) -> tuple[list, str]:
    """The fixed profile set of eval/compare (a file, or N per user set sampled with --seed, which also
    seeds every call: dialogue_seed(cfg.seed, 0, profile index) is the same for every agent)."""
    from dataclasses import replace
    if args.seed is not None:
        cfg.seed = args.seed
    if args.profiles:
        profiles, source = read_profiles(args.profiles, scenario), f"file {args.profiles}"
    else:
        n = cfg.train.batch_size if args.n is None else args.n
        cold = replace(cfg, curriculum=replace(cfg.curriculum, depth="off"))   # --depth sets where calls start
        profiles = [p for group in profiles_by_user_set(cold, scenario, args.user_sets, n, cfg.seed).values()
                    for p in group]
        source = f"{len(profiles)} profiles sampled with seed {cfg.seed}"
    if args.depth is not None:
        depth = None if args.depth == "cold" else args.depth
        profiles = [replace(p, start_depth=depth) for p in profiles]
        source += ", cold calls" if depth is None else f", started {depth} turn(s) before the honest script's ask"
    return profiles, source
