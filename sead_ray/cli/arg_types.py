"""What several commands' parsers share: the argument types (argparse names the flag in their errors) and the config
and profile-set arguments."""
from __future__ import annotations

import argparse


def count(text: str) -> int:
    """argparse type of --n: an integer >= 1 (argparse names the flag in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def start_depth(text: str) -> str | int:
    """argparse type of --depth: 'cold' or an integer >= 0."""
    if text == "cold":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'cold' or a depth >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a depth counts turns back from the final ask: >= 0, got {value}")
    return value


def seed(text: str) -> int:
    """argparse type of --seed: an integer in 0..2**32-1 (the range of the config's `seed`)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value <= 2**32 - 1:
        raise argparse.ArgumentTypeError(f"must be in 0..{2**32 - 1}, got {value}")
    return value


def add_config_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--config", "-c", required=required, metavar="FILE",
                   help="run config YAML (e.g. configs/embedded.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set train.batch_size=4 (repeatable; values are YAML)")


def add_profile_set_args(p: argparse.ArgumentParser, required: bool) -> None:
    """The fixed profile set of eval and compare: a file, or N sampled (per user set) with a seed."""
    source = p.add_mutually_exclusive_group(required=required)
    source.add_argument("--profiles", metavar="FILE.jsonl", help="fixed profile set (as written by `profiles sample`)")
    source.add_argument("--n", type=count, default=None,
                        help="sample N profiles, per user set with --user-sets (default: train.batch_size)")
    p.add_argument("--seed", type=seed, default=None,
                   help="seed of the sampled profiles and of every call's sampling (default: the config's)")
    p.add_argument("--user-sets", default=None, metavar="SET,SET",
                   help="sample N profiles from each of these user sets of the scenario (e.g. soft,hard); each set "
                        "is also reported apart")
    p.add_argument("--depth", type=start_depth, default=None, metavar="cold|K",
                   help="where every call starts: cold (the paper: the agent plays the whole call) or K (the "
                        "scenario's honest script plays the call up to K turns before its final ask, the agent the "
                        "rest; where the script cannot, the call is cold). Default: a --profiles file's own "
                        "start_depth, else cold")
