"""Checks across config keys, after each key passed its own type and range check (sead_ray.config)."""
from __future__ import annotations

from .config import ConfigError, SeadConfig


def cross_checks(cfg: SeadConfig, where: str) -> None:
    cur = cfg.curriculum
    if cur.hard_below > cur.easy_above:
        raise ConfigError(f"{where}: curriculum.hard_below ({cur.hard_below}) must not exceed "
                          f"curriculum.easy_above ({cur.easy_above})")
    if cur.min_behaviors > cur.max_behaviors:
        raise ConfigError(f"{where}: curriculum.min_behaviors ({cur.min_behaviors}) must not exceed "
                          f"curriculum.max_behaviors ({cur.max_behaviors})")
    if isinstance(cfg.user_sim.engines, int) and cfg.user_sim.engines < 1:
        raise ConfigError(f"{where}: user_sim.engines must be >= 1 or 'auto', got {cfg.user_sim.engines}")
    for table in ("usd_per_mtok_in", "usd_per_mtok_out"):
        negative = {m: v for m, v in getattr(cfg.cost, table).items() if v < 0}
        if negative:
            raise ConfigError(f"{where}: cost.{table}: prices must be >= 0, got {negative}")
    if cfg.user_sim.train and cfg.user_sim.backend != "vllm":
        raise ConfigError(f"{where}: user_sim.train = true trains the simulator's model: it needs user_sim.backend = "
                          f"vllm (got {cfg.user_sim.backend})")
    if cfg.user_sim.train and cfg.placement.colocate:
        raise ConfigError(f"{where}: user_sim.train = true needs placement.colocate = false (the simulator's trainer "
                          "has GPUs of its own)")
    # vLLM's attention kernels take blocks of a multiple of 32 tokens on CPU, of 16 on CUDA
    on_cpu = cfg.placement.agent_policy.gpus == 0 or (cfg.user_sim.backend == "vllm" and cfg.placement.user_sim.gpus == 0)
    if cfg.engine.block_size % (32 if on_cpu else 16):
        raise ConfigError(f"{where}: engine.block_size must be a multiple of {32 if on_cpu else 16} with engines on "
                          f"{'CPU' if on_cpu else 'CUDA'} (or 0 for vLLM's default), got {cfg.engine.block_size}")
    _check_engines(cfg, where)
    _check_transport(cfg, where)


def _check_engines(cfg: SeadConfig, where: str) -> None:
    """An engine with tensor parallelism T needs T GPUs in its bundle (vLLM starts T workers there)."""
    for role, tp in (("agent_policy", cfg.agent.tensor_parallel_size), ("user_sim", cfg.user_sim.tensor_parallel_size)):
        gpus = getattr(cfg.placement, role).gpus
        if (gpus > 0 or tp > 1) and gpus != tp:
            section = "agent" if role == "agent_policy" else "user_sim"
            raise ConfigError(f"{where}: {section}.tensor_parallel_size = {tp} needs placement.{role}.gpus = {tp} "
                              f"(got {gpus:g})")


def _check_transport(cfg: SeadConfig, where: str) -> None:
    """What the config alone says about the weight transport (the cluster is checked at start)."""
    transport, p = cfg.weight_sync.transport, cfg.placement
    if transport in ("nccl", "ipc") and not (p.trainer.gpus > 0 and p.agent_policy.gpus > 0):
        raise ConfigError(f"{where}: weight_sync.transport = {transport} needs CUDA on both ends, but "
                          f"placement.trainer.gpus = {p.trainer.gpus:g} and placement.agent_policy.gpus = "
                          f"{p.agent_policy.gpus:g}; use gloo, object_store or shm on CPU")
    if transport == "ipc" and not p.colocate:
        raise ConfigError(f"{where}: weight_sync.transport = ipc shares GPU memory between the trainer and the agent "
                          "engines on the same GPUs: it needs placement.colocate = true (else use nccl)")
    if p.colocate and transport != "ipc" and p.agent_policy.gpus > 0:
        raise ConfigError(f"{where}: placement.colocate = true on GPUs moves weights over CUDA IPC: set "
                          f"weight_sync.transport = ipc (got {transport})")
