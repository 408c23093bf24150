"""Weight sync, the trainer's side: one interface (`WeightTransport`), one sender per entry of the registry of
`weight_sync.transport` (sead_ray.core.transports), from the trainer's ranks to every engine of the trained role
(the agent's, or the simulator's under user.train). The engine's side: actors.weights.receive (file transports),
actors.weights.extension and gloo (vLLM's API); vLLM's client over our engines: actors.weights.vllm_client.

Every trainer rank calls `send(source, version)` with the same `source` (under ZeRO-3 gathering each
parameter is a collective); only rank 0 ships tensors and returns a `SyncResult`. On the syncs that
`weight_sync.verify` checks, rank 0 digests each tensor as it sends it (`DigestedSource`), every engine's workers
digest what they received under the same names (actors.weights.extension), and the result says whether they agree.

- `shm`:          same node. Rank 0 copies each parameter into its place in one safetensors file under
                  /dev/shm, overwritten version after version; each engine reloads from it where it lies.
- `object_store`: any node. Rank 0 `ray.put`s buckets of about `bucket_mb`; each engine fetches them.
- `gloo` / `nccl`: vLLM's RL weight-transfer API (`vllm.distributed.weight_transfer`):
                  the trainer engine of the backend streams tensors straight into every engine's
                  workers (gloo: actors.weights.gloo, ours, on CPU; nccl: between GPUs).
"""
from __future__ import annotations

import importlib
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, Optional, Protocol

from actors.weights.files import SharedWeightFile, tensor_nbytes
from actors.weights.receive import WeightHandle
from actors.weights.vllm_client import EnginePoolClient
from sead_ray.core.transports import WEIGHT_TRANSPORTS
from sead_ray.training.trainer_protocol import SyncResult, WeightSyncFailed
from sead_ray.training.weight_digest import DigestedSource, SyncChecks, verification

log = logging.getLogger(__name__)


class WeightSource(Protocol):
    """The trainer's weights, in HF checkpoint naming: `metadata()` without gathering, then one
    `(name, full tensor)` pair at a time (the tensor is valid until the next pair; None off rank 0)."""
    def metadata(self) -> list: ...
    def __iter__(self): ...


class WeightTransport(Protocol):
    def send(self, source: WeightSource, version: int) -> Optional[SyncResult]: ...
    def close(self) -> None: ...


class GatheredWeights:
    """The model's parameters in HF naming for weight sync and checkpoints: `metadata()` without
    gathering; iterating gathers one parameter at a time on every rank (a collective under ZeRO-3) and
    yields the full tensor on rank 0 (valid until the next one), None elsewhere."""

    def __init__(self, module: Any, zero_stage: int, rank: int):
        self.module, self.zero_stage, self.rank = module, zero_stage, rank

    def metadata(self) -> list:
        from vllm.distributed.weight_transfer.base import ParamMeta
        return [ParamMeta(name, p.dtype, tuple(p.ds_shape if self.zero_stage == 3 else p.shape))
                for name, p in self.module.named_parameters()]

    def __iter__(self):
        import deepspeed
        for name, param in self.module.named_parameters():
            if self.zero_stage == 3:
                with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
                    yield name, param.data if self.rank == 0 else None
            else:
                yield name, param.data if self.rank == 0 else None


class _FileTransport:
    """Base of `shm` and `object_store`: rank 0 publishes a handle, every engine applies it."""

    def __init__(self, engines: list, rank: int, bucket_mb: int, workers_per_engine: int = 1, verify: str = "every"):
        self.engines, self.rank, self.bucket_mb = engines, rank, bucket_mb
        self.checks = SyncChecks(verify)

    def close(self) -> None:
        """Nothing is held between versions."""

    def publish(self, source: WeightSource, version: int) -> WeightHandle:
        raise NotImplementedError

    def send(self, source: WeightSource, version: int) -> Optional[SyncResult]:
        import ray
        t0 = time.perf_counter()
        if self.rank != 0:
            for _ in source:
                pass
            return None
        verify = self.checks.this_sync()
        sent = DigestedSource(source, verify)
        handle = self.publish(sent, version)
        published = time.perf_counter() - t0
        applied = ray.get([engine.apply_weights.remote(handle, verify) for engine in self.engines])
        return self.checks.seen(SyncResult(version, handle.nbytes / 2**20, published, max(a["apply_s"] for a in applied),
                                           time.perf_counter() - t0,
                                           **verification(sent.recorder, [a["received"] for a in applied])))


class ShmTransport(_FileTransport):
    """One file for the transport's life, laid out from the first source's metadata: each version is one
    copy of every parameter into it (no serialising, no new pages), and the engines read it in place.
    Versions never overlap: `send` returns once every engine applied the version."""
    file: Optional[SharedWeightFile] = None

    def publish(self, source, version):
        if self.file is None:
            self.file = SharedWeightFile([(m.name, m.dtype, m.shape) for m in source.metadata()], version)
        nbytes = self.file.write(source)
        return WeightHandle(version, "shm", path=self.file.path, nbytes=nbytes)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class ObjectStoreTransport(_FileTransport):
    def publish(self, source, version):
        import ray
        buckets, current, size, total = [], {}, 0, 0
        for name, t in source:
            current[name] = t.detach().to("cpu", copy=True).contiguous()   # valid past the gather
            size += t.numel() * t.element_size()
            if size >= self.bucket_mb << 20:
                buckets.append(ray.put(current))
                total, current, size = total + size, {}, 0
        if current:
            buckets.append(ray.put(current))
            total += size
        return WeightHandle(version, "object_store", buckets=buckets, nbytes=total)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _rendezvous() -> dict:
    """A TCP rendezvous on rank 0's node."""
    import ray
    return {"master_address": ray.util.get_node_ip_address(), "master_port": _free_port()}


def gloo_init_info(rank: int, world_size: int, bucket_mb: int, timeout_s: float):
    from actors.weights.gloo import GlooTrainerInitInfo
    return GlooTrainerInitInfo(**_rendezvous(), world_size=world_size, rank=rank, timeout_s=timeout_s, packed=True,
                               packed_buffer_size_bytes=bucket_mb << 20)


def nccl_init_info(rank: int, world_size: int, bucket_mb: int, timeout_s: float):
    # (vLLM's PyNccl communicator takes no timeout: only the driver's wait bounds a hung NCCL sync)
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo
    return NCCLTrainerInitInfo(**_rendezvous(), world_size=world_size, rank=rank, packed=True,
                               packed_buffer_size_bytes=bucket_mb << 20)


class VllmApiTransport:
    """`gloo`, `nccl`: vLLM's trainer engine for the backend, built on the first send (every
    rank; rank 0 rendezvouses with every engine's workers), then one `send_weights` per version."""

    def __init__(self, engines: list, rank: int, bucket_mb: int, backend: str, init_info: Callable[..., Any],
                 workers_per_engine: int = 1, timeout_s: float = 600.0, verify: str = "every"):
        self.client = EnginePoolClient(engines, workers_per_engine)
        self.rank, self.bucket_mb, self.backend, self.timeout_s = rank, bucket_mb, backend, timeout_s
        self.init_info = init_info   # (rank, world size, bucket MB, timeout) -> vLLM's trainer-side init info
        self.checks = SyncChecks(verify)
        self.engine = None
        self.source = _Relay()

    def send(self, source: WeightSource, version: int) -> Optional[SyncResult]:
        t0 = time.perf_counter()
        self.client.digest = self.checks.this_sync()
        sent = DigestedSource(source, self.client.digest and self.rank == 0)
        self.source.current, self.source.active, self.client.version = sent, None, version
        try:
            if self.engine is None:
                from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

                from actors.weights.gloo import register
                register()   # the trainer process loads no vLLM plugins by itself
                info = self.init_info(self.rank, self.client.world_size, self.bucket_mb, self.timeout_s)
                self.engine = WeightTransferTrainerFactory.trainer_init(info, client=self.client, source=self.source)
            self.engine.send_weights()
        except Exception as exc:
            # An engine died or a transfer failed. Every rank gathers every parameter (a collective): finish
            # the gathers the other ranks are in, so that they return and the trainer stays usable; the
            # transfer group is broken and is rebuilt on the next send.
            self.source.drain()
            self.close()
            raise WeightSyncFailed(f"weight sync v{version} ({self.backend}) failed: {exc!r}") from exc
        if self.rank != 0:
            return None
        nbytes = sum(tensor_nbytes(m.dtype, m.shape) for m in source.metadata())
        # gathering and sending are one stream here: no separate publish time
        return self.checks.seen(SyncResult(version, nbytes / 2**20, None, self.client.apply_s, time.perf_counter() - t0,
                                           **verification(sent.recorder, self.client.received)))

    def close(self) -> None:
        """Release the trainer side of the group (the engines re-initialise theirs on the next send)."""
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None


class _Relay:
    """The engine keeps one source for its lifetime; each send points it at that version's weights."""
    current: Any = None
    active: Any = None     # the iteration of the send in progress

    def metadata(self) -> list:
        return self.current.metadata()

    def __iter__(self):
        self.active = iter(self.current)
        return self.active

    def drain(self) -> None:
        """The rest of the send's iteration (all of it if the send failed before it began)."""
        for _ in self.active if self.active is not None else iter(self.current):
            pass
        self.active = None


def load_attr(ref: str) -> Any:
    """`module:attribute` -> the attribute (a registry entry names its sender without importing it)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def make_transport(name: str, *, engines: list, rank: int, bucket_mb: int, workers_per_engine: int = 1,
                   timeout_s: float = 600.0, verify: str = "every") -> WeightTransport:
    """The sender of the transport `name`, as its registry entry names it; `verify`: weight_sync.verify, which syncs
    compare the engines' digests with rank 0's."""
    needs = WEIGHT_TRANSPORTS.get(name)
    sender = load_attr(needs.sender)
    extra = {"backend": name, "init_info": load_attr(needs.vllm_init), "timeout_s": timeout_s} if needs.vllm_api else {}
    return sender(engines=engines, rank=rank, bucket_mb=bucket_mb, workers_per_engine=workers_per_engine,
                  verify=verify, **extra)
