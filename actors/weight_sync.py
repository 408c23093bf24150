"""Weight sync: one interface, several transports, from the trainer's rank 0 to the agent engine.

The trainer publishes a versioned stream of (name, full tensor) pairs in HF checkpoint naming (every
ZeRO-3 rank takes part in gathering each parameter; only rank 0 holds the result). A transport turns
the stream into a small picklable `WeightHandle`; the AgentPolicyActor applies the handle and from
then on serves that version.

- `shm`:          same node. Rank 0 writes one safetensors file under /dev/shm; the engine reloads it.
- `object_store`: any node. Rank 0 `ray.put`s buckets of about `bucket_mb`; the engine actor fetches
                  them, writes its own local /dev/shm file and reloads.
- `nccl`:         GPUs. Rank 0 broadcasts each tensor over an NCCL group joined by the engine's workers
                  (see `NcclTransport`); never run on the CPU machines of CI.
"""
from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

TRANSPORTS = ("shm", "object_store", "nccl")


@dataclass
class WeightHandle:
    """What crosses from the trainer to the engine: a version and where its tensors are."""
    version: int
    transport: str
    path: str = ""                                   # shm
    buckets: list = field(default_factory=list)      # object_store: ObjectRefs of {name: tensor}
    names: list = field(default_factory=list)        # nccl: (name, dtype, shape) in send order
    nbytes: int = 0
    publish_s: float = 0.0


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def publish(named_tensors: Iterable[tuple[str, Any]], version: int, transport: str, bucket_mb: int = 64,
            tag: str = "sead") -> WeightHandle:
    """Turn the full-tensor stream into a handle (rank 0 only)."""
    t0 = time.perf_counter()
    if transport == "shm":
        from safetensors.torch import save_file
        tensors = {name: t.contiguous() for name, t in named_tensors}
        path = os.path.join(_shm_dir(), f"{tag}-weights-v{version}-{os.getpid()}.safetensors")
        save_file(tensors, path)
        handle = WeightHandle(version, "shm", path=path, nbytes=sum(t.numel() * t.element_size() for t in tensors.values()))
    elif transport == "object_store":
        import ray
        buckets, current, size, total = [], {}, 0, 0
        for name, t in named_tensors:
            current[name] = t.contiguous()
            size += t.numel() * t.element_size()
            if size >= bucket_mb << 20:
                buckets.append(ray.put(current))
                total, current, size = total + size, {}, 0
        if current:
            buckets.append(ray.put(current))
            total += size
        handle = WeightHandle(version, "object_store", buckets=buckets, nbytes=total)
    elif transport == "nccl":
        raise ValueError("the nccl transport streams tensors while gathering: use NcclTransport.send")
    else:
        raise ValueError(f"unknown weight-sync transport {transport!r} (one of {TRANSPORTS})")
    handle.publish_s = time.perf_counter() - t0
    return handle


def materialize(handle: WeightHandle) -> tuple[str, bool]:
    """On the engine's side: a local safetensors path for the handle, and whether to delete it after."""
    if handle.transport == "shm":
        return handle.path, True
    if handle.transport == "object_store":
        import ray
        from safetensors.torch import save_file
        tensors: dict = {}
        for bucket in ray.get(list(handle.buckets)):
            tensors.update(bucket)
        path = os.path.join(_shm_dir(), f"sead-recv-v{handle.version}-{os.getpid()}.safetensors")
        save_file(tensors, path)
        return path, True
    raise ValueError(f"transport {handle.transport!r} is not applied from a file")


def discard(path: str) -> None:
    try:
        Path(path).unlink()
    except FileNotFoundError:
        pass


class NcclTransport:
    """GPU transport (written for vLLM 0.32 CUDA; not runnable on CPU machines).

    The trainer's rank 0 and the engine's worker(s) form a 2-party NCCL group through vLLM's
    `StatelessProcessGroup` + `PyNcclCommunicator` (created on both sides with the same host/port);
    rank 0 broadcasts each gathered tensor in order and the engine's worker extension receives into
    fresh CUDA buffers and reloads them through `reload_weights`. Tensors never touch host memory.
    """

    def __init__(self, host: str, port: int, world_size: int = 2, device: Optional[Any] = None):
        import torch
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup
        self.device = device or torch.device("cuda", torch.cuda.current_device())
        group = StatelessProcessGroup.create(host=host, port=port, rank=0, world_size=world_size)
        self.comm = PyNcclCommunicator(group, device=self.device)

    def send(self, named_tensors: Iterable[tuple[str, Any]], version: int) -> Iterator[tuple[str, str, tuple]]:
        """Broadcast tensors from rank 0; yields (name, dtype, shape) so the caller can tell the engine
        what to receive (the engine must be receiving concurrently)."""
        import torch
        for name, t in named_tensors:
            t = t.to(self.device, non_blocking=True)
            self.comm.broadcast(t, src=0, stream=torch.cuda.current_stream())
            yield name, str(t.dtype).replace("torch.", ""), tuple(t.shape)
