"""Before anything starts: can the configured weight transport work on this cluster (one node for `shm`, room in
/dev/shm, CUDA for `nccl`)? Read by `sead-ray train` and `sead-ray doctor`."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional

from sead_ray.core.transports import WEIGHT_TRANSPORTS

log = logging.getLogger(__name__)


def trained_weight_bytes(cfg: Any, agent_model: str, user_model: Optional[str] = None) -> int:
    """What a one-node transport (shm) holds in /dev/shm: each trained model's weights, in the configured dtype
    (the agent's; the simulator's too under user.train). 0 for other transports, or when a size is unknown."""
    from sead_ray.ops.model_shape import DTYPE_BYTES, reference_shape
    if not WEIGHT_TRANSPORTS.get(cfg.weight_sync.transport).one_node:
        return 0
    models = [agent_model] + ([user_model or cfg.models.user] if cfg.user.train else [])
    try:
        return sum(reference_shape(m).params for m in models) * DTYPE_BYTES[cfg.models.dtype]
    except ValueError as exc:    # no config.json and no known shape
        log.info("no /dev/shm check: %s", exc)
        return 0


def shm_free_bytes(node_id: str) -> int:
    """Free bytes of /dev/shm on a node, measured there."""
    import shutil

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    if node_id == ray.get_runtime_context().get_node_id():   # this node: no task needed
        return shutil.disk_usage("/dev/shm").free
    free = ray.remote(num_cpus=0)(lambda: shutil.disk_usage("/dev/shm").free)
    return ray.get(free.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(),
                   timeout=120)


def transport_placement_problem(cfg: Any, nodes: list[dict], weight_bytes: int = 0,
                                shm_free: Optional[Callable[[str], int]] = None) -> Optional[str]:
    """Why the configured transport cannot work on this cluster, before anything starts (None if it can).

    `nodes`: the alive nodes as `{"NodeID", "NodeManagerAddress", "Resources"}` (ray.nodes()); `weight_bytes`:
    the trained roles' weights as the trainer sends them; `shm_free(node_id)`: free bytes of that node's /dev/shm."""
    from placement import bundle_for

    def hosts(role: str) -> dict[str, str]:
        need = bundle_for(getattr(cfg.placement, role))
        return {n["NodeID"]: f"{n['NodeManagerAddress']} ({n['NodeID'][:8]})" for n in nodes
                if all(n["Resources"].get(k, 0.0) >= v for k, v in need.items())}
    transport = cfg.weight_sync.transport
    needs = WEIGHT_TRANSPORTS.get(transport)
    if needs.one_node:
        roles = ["trainer", "agent"] + (["user"] if cfg.user.train else [])   # the engines trained
        candidates = {node: name for role in roles for node, name in hosts(role).items()}
        if len(candidates) > 1:
            return (f"weight_sync.transport = shm needs the trainer's rank 0 and every agent engine on one node "
                    f"(a file in /dev/shm), but roles {' and '.join(roles)} can land on {len(candidates)} nodes: "
                    f"{', '.join(sorted(candidates.values()))}. Use gloo or object_store across nodes, or pin the "
                    "roles with placement.<role>.node_resource")
        for node, name in candidates.items():
            free = shm_free(node) if shm_free is not None and weight_bytes else None
            if free is not None and free < weight_bytes * 1.05:
                return (f"weight_sync.transport = shm writes the trained weights ({weight_bytes / 2**30:.1f} GiB, a file "
                        f"per trained model) into /dev/shm of node {name}, which has {free / 2**30:.1f} GiB free: use "
                        "gloo (nccl on GPUs), or give the node more shared memory (docker run --shm-size)")
    if needs.cuda:
        gpus = sum(n["Resources"].get("GPU", 0.0) for n in nodes)
        if gpus == 0:
            return f"weight_sync.transport = {transport} needs CUDA GPUs, and no node of the cluster has one"
    return None
