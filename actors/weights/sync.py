"""Weight sync: one interface (`WeightTransport`), a registry keyed by `weight_sync.transport`, from
the trainer's ranks to every engine of the trained role (the agent's, or the simulator's under user.train).

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

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Optional, Protocol

from actors.weights.files import SharedWeightFile, discard, tensor_nbytes, write_private_weights
from sead_ray.core.transports import WEIGHT_TRANSPORTS
from sead_ray.training.trainer_protocol import SyncResult, WeightSyncFailed
from sead_ray.training.weight_digest import DigestedSource, SyncChecks, verification

log = logging.getLogger(__name__)


@dataclass
class WeightHandle:
    """What crosses from the trainer to the engines (file transports): a version and its tensors."""
    version: int
    transport: str
    path: str = ""                                   # shm
    buckets: list = field(default_factory=list)      # object_store: ObjectRefs of {name: tensor}
    nbytes: int = 0


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


class EnginePoolClient:
    """vLLM's weight-sync client protocol (`VLLMWeightSyncClient`) over the engine actors of the trained role.

    vLLM's trainer engines address one inference deployment whose workers sit at group ranks
    `rank_offset + worker rank`; our pool is several separate engines, so engine i's workers are
    shifted by i x workers per engine."""

    def __init__(self, engines: list, workers_per_engine: int):
        self.engines, self.workers_per_engine = engines, workers_per_engine
        self.version = 0
        self.digest = False                      # this version's engines digest what they receive
        self.received: list = []                 # per engine, its workers' digests (or None) of the last version
        self.apply_s: Optional[float] = None

    @property
    def world_size(self) -> int:
        return 1 + len(self.engines) * self.workers_per_engine

    def _all(self, call: Callable[[int, Any], Any]) -> list:
        import ray
        return ray.get([call(i, engine) for i, engine in enumerate(self.engines)])

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        def shifted(i: int) -> dict:
            if "rank_offset" not in init_info:
                return init_info
            return {**init_info, "rank_offset": init_info["rank_offset"] + i * self.workers_per_engine}
        self._all(lambda i, a: a.init_weight_transfer_engine.remote(shifted(i)))

    def start_weight_update(self) -> None:
        self._t0 = time.perf_counter()
        self._all(lambda i, a: a.start_weight_update.remote(self.digest))

    def update_weights(self, update_info: dict) -> None:
        self._all(lambda i, a: a.update_weights.remote(update_info))

    def finish_weight_update(self, weight_version: Optional[str] = None) -> None:
        finished = self._all(lambda i, a: a.finish_weight_update.remote(self.version))
        self.received = [f["received"] for f in finished]
        self.apply_s = time.perf_counter() - self._t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _rendezvous() -> dict:
    """A TCP rendezvous on rank 0's node."""
    import ray
    return {"master_address": ray.util.get_node_ip_address(), "master_port": _free_port()}


def _gloo_info(rank: int, world_size: int, bucket_mb: int, timeout_s: float):
    from actors.weights.gloo import GlooTrainerInitInfo
    return GlooTrainerInitInfo(**_rendezvous(), world_size=world_size, rank=rank, timeout_s=timeout_s)


def _nccl_info(rank: int, world_size: int, bucket_mb: int, timeout_s: float):
    # (vLLM's PyNccl communicator takes no timeout: only the driver's wait bounds a hung NCCL sync)
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo
    return NCCLTrainerInitInfo(**_rendezvous(), world_size=world_size, rank=rank, packed=True,
                               packed_buffer_size_bytes=bucket_mb << 20)


# each transport of vLLM's API (its vllm_api in sead_ray.core.transports) -> the builder of its trainer-side
# init info (vLLM picks the trainer engine from the info's class)
VLLM_BACKENDS: dict[str, Callable[..., Any]] = {
    "gloo": _gloo_info,
    "nccl": _nccl_info,
}


class VllmApiTransport:
    """`gloo`, `nccl`: vLLM's trainer engine for the backend, built on the first send (every
    rank; rank 0 rendezvouses with every engine's workers), then one `send_weights` per version."""

    def __init__(self, engines: list, rank: int, bucket_mb: int, backend: str, workers_per_engine: int = 1,
                 timeout_s: float = 600.0, verify: str = "every"):
        self.client = EnginePoolClient(engines, workers_per_engine)
        self.rank, self.bucket_mb, self.backend, self.timeout_s = rank, bucket_mb, backend, timeout_s
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
                info = VLLM_BACKENDS[self.backend](self.rank, self.client.world_size, self.bucket_mb, self.timeout_s)
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


TRANSPORTS: dict[str, Callable[..., WeightTransport]] = {
    "shm": ShmTransport,
    "object_store": ObjectStoreTransport,
    **{name: partial(VllmApiTransport, backend=name) for name in VLLM_BACKENDS},
}


def make_transport(name: str, *, engines: list, rank: int, bucket_mb: int, workers_per_engine: int = 1,
                   timeout_s: float = 600.0, verify: str = "every") -> WeightTransport:
    """`verify`: weight_sync.verify, which syncs compare the engines' digests with rank 0's."""
    if name not in TRANSPORTS:
        raise ValueError(f"unknown weight-sync transport {name!r} (one of {sorted(TRANSPORTS)})")
    extra = {"timeout_s": timeout_s} if name in VLLM_BACKENDS else {}
    return TRANSPORTS[name](engines=engines, rank=rank, bucket_mb=bucket_mb, workers_per_engine=workers_per_engine,
                            verify=verify, **extra)


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
