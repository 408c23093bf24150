"""What an engine of a role is given, from the config (engine_spec_from_config): its KV cache (`engine.kv_cache_mb:
auto`, from the memory plan), its share of a GPU, whether it takes weights from a trainer and by which transport."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from actors.vllm_engine import EngineSpec
from sead_ray.core.roles import trained_roles
from sead_ray.core.transports import WEIGHT_TRANSPORTS

log = logging.getLogger(__name__)


def takes_weights(cfg: Any, role: str) -> bool:
    """The engines of `role` take each new weight version from a trainer (the agent's; the simulator's with
    user.train)."""
    return role in trained_roles(cfg)


def engine_spec_from_config(cfg: Any, role: str, model_path: str, seed: int, omp_threads_bind: str = "") -> EngineSpec:
    """The engine of `role` (agent or user): CUDA settings where the role has GPUs."""
    on_gpu = getattr(cfg.placement, role).gpus > 0
    transport = cfg.weight_sync.transport
    tensor_parallel = getattr(cfg, role).tensor_parallel_size   # the config's section of the role: agent, user
    kv_cache_mb = cfg.engine.kv_cache_mb
    if kv_cache_mb == "auto":
        kv_cache_mb = engine_kv_cache_mb(cfg, role, model_path, tensor_parallel, on_gpu)
    return EngineSpec(model_path=model_path, dtype=cfg.models.dtype, kv_cache_mb=kv_cache_mb,
                      gpu_memory_utilization=engine_gpu_memory_utilization(cfg, role, model_path, tensor_parallel,
                                                                           kv_cache_mb) if on_gpu else 0.0,
                      max_model_len=cfg.engine.max_model_len, max_num_seqs=cfg.engine.max_num_seqs,
                      block_size=cfg.engine.block_size, seed=seed, omp_threads_bind=omp_threads_bind,
                      tensor_parallel_size=tensor_parallel,
                      enforce_eager=not on_gpu, chunked_prefill=on_gpu,
                      weight_transfer_backend=(transport if WEIGHT_TRANSPORTS.get(transport).vllm_api
                                               and takes_weights(cfg, role) else ""),
                      memory_wait_s=cfg.engine.memory_wait_s)


_kv_logged: set = set()


def engine_kv_cache_mb(cfg: Any, role: str, model_path: str, tensor_parallel: int, on_gpu: bool) -> int:
    """`engine.kv_cache_mb: auto` for one engine of `role` (sead_ray.ops.memory_plan.auto_kv_cache_mb): the
    agent's system prompt counted at 3 characters a token (an upper estimate), the memory available on
    this node now as the cap on CPU; logged once per role and model."""
    import psutil

    from sead_ray.agent.prompt import agent_system_prompt
    from sead_ray.ops import memory_plan
    from sead_ray.ops.model_shape import ModelShape
    from sead_ray.scenario.scenario import load_scenario
    from sead_ray.user.simulators import user_on_engine
    shape = ModelShape.from_hf_config(Path(model_path) / "config.json")
    prompt_tokens = len(agent_system_prompt(load_scenario(cfg.resolve_path(cfg.scenario)))) // 3
    user_engines = cfg.user.engines if isinstance(cfg.user.engines, int) else 1
    engines = cfg.agent.engines + (user_engines if user_on_engine(cfg.user) else 0)
    # on a GPU the cap is the device: what its memory leaves after the weights and the engine's runtime
    mb, why = memory_plan.auto_kv_cache_mb(cfg, shape, tensor_parallel, prompt_tokens,
                                           None if on_gpu else psutil.virtual_memory().available, engines,
                                           device_bytes=memory_plan.device_memory_bytes(cfg) if on_gpu else None,
                                           takes_weights=takes_weights(cfg, role))
    if (role, model_path) not in _kv_logged:
        _kv_logged.add((role, model_path))
        log.info("%s engines: KV cache auto = %d MB (%s)", role, mb, why)
    return mb


def engine_gpu_memory_utilization(cfg: Any, role: str, model_path: str, tensor_parallel: int, kv_cache_mb: int) -> float:
    """vLLM's gpu_memory_utilization for an engine of `role` on a GPU, from the memory plan
    (sead_ray.ops.memory_plan.engine_memory_utilization); 0 (vLLM's default) where the GPU's memory or the
    model's shape is unknown here."""
    from sead_ray.ops import memory_plan
    from sead_ray.ops.model_shape import model_shape
    device = memory_plan.device_memory_bytes(cfg)
    try:
        shape = model_shape(model_path, Path(model_path))
    except ValueError:
        device = None
    return 0.0 if device is None else memory_plan.engine_memory_utilization(cfg, shape, tensor_parallel, device,
                                                                            kv_cache_mb, takes_weights(cfg, role))
