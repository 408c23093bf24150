"""The Ray cluster a run works on: connect to it (or start a local one), the environment of every actor, and which
nodes cannot see the run's folder."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import ray

from sead_ray.core.config import SeadConfig

log = logging.getLogger(__name__)

# Quiet actors: deprecation notices would bury the progress bars; vLLM's own lines are at `engine.log_level`
# (ERROR by default: its start-up warnings on CPU, eager mode, no Triton, ...; INFO on a first GPU run).
ACTOR_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "1",
             "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning"}


def actor_env(cfg: SeadConfig) -> dict[str, str]:
    """The environment of every actor of a run (Ray's job-wide runtime env)."""
    return {**ACTOR_ENV, "VLLM_LOGGING_LEVEL": cfg.engine.log_level}


def init_ray(cfg: SeadConfig) -> dict:
    """Connect to `ray.address` / $RAY_ADDRESS, or start a local cluster sized by `ray.num_cpus`."""
    if ray.is_initialized():
        return ray.cluster_resources()
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict = {"runtime_env": {"env_vars": actor_env(cfg)}, "log_to_driver": True}
    local = ({"num_cpus": cfg.ray.num_cpus or os.cpu_count() or 2, "include_dashboard": cfg.ray.dashboard}
             if address in (None, "local") else {})
    try:
        ray.init(address=address, **kwargs, **local)
    except ValueError as exc:   # a cluster started here with `ray start`, which ray.init finds by itself
        if not local or "connecting to an existing cluster" not in str(exc):
            raise
        log.info("joining the Ray cluster started on this machine with `ray start` (as `ray job submit` "
                 "would); ray.num_cpus does not apply to it. For a private one: --set ray.address=local")
        ray.init(address="auto", **kwargs)
    resources = ray.cluster_resources()
    log.info("Ray cluster: %s", {k: v for k, v in resources.items() if not k.startswith("node:")})
    return resources


def _sees(path: str) -> bool:
    return os.path.exists(path)


def unshared_run_dir_nodes(run_dir: Path) -> list[str]:
    """The alive nodes that do not see `run_dir` (the stats actor and the trainer's rank 0 may land on
    any node and write there): a marker file is written here and looked for from a task on each other
    node (none on a one-node cluster)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    here = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here]
    if not nodes:
        return []
    marker = Path(run_dir) / f".sead-shared-check-{os.getpid()}"
    marker.write_text("")
    try:
        sees = ray.remote(num_cpus=0)(_sees)
        seen = ray.get([sees.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                        .remote(str(marker)) for n in nodes], timeout=120)
    finally:
        marker.unlink(missing_ok=True)
    return [f"{n['NodeManagerAddress']} ({n['NodeID'][:8]})" for n, ok in zip(nodes, seen) if not ok]
