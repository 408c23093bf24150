"""The engine's side of a weight sync by a file transport (`shm`, `object_store`): what crosses from the trainer
(`WeightHandle`) and how a running engine takes a version from it. The trainer's side: actors.weights.senders."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from actors.weights.files import discard, write_private_weights


@dataclass
class WeightHandle:
    """What crosses from the trainer to the engines (file transports): a version and its tensors."""
    version: int
    transport: str
    path: str = ""                                   # shm
    buckets: list = field(default_factory=list)      # object_store: ObjectRefs of {name: tensor}
    nbytes: int = 0


def materialize(handle: WeightHandle) -> tuple[str, bool]:
    """On an engine's side: a local safetensors path for the handle, and whether to delete it after
    (a shm file belongs to the trainer, which overwrites it with the next version)."""
    if handle.transport == "shm":
        return handle.path, False
    import ray
    tensors: dict = {}
    for bucket in ray.get(list(handle.buckets)):
        tensors.update(bucket)
    return write_private_weights(tensors, "recv", handle.version), True


async def apply_handle(engine: Any, handle: WeightHandle, digest: bool = False) -> tuple[int, float, Optional[list]]:
    """On an engine's side (agent or trained simulator): reload every weight of a published version into
    the running VLLMEngine `engine`; returns (tensors, seconds, each worker's digest of what it read or None)."""
    t0 = time.perf_counter()
    path, delete = materialize(handle)
    try:
        tensors, received = await engine.reload_weights_from_file(path, digest)
    finally:
        if delete:
            discard(path)
    return tensors, time.perf_counter() - t0, received
