"""A `gloo` backend for vLLM's RL weight-transfer API (vllm.distributed.weight_transfer, pinned 0.32),
so that CPU machines (and CI) run the very handshake the GPU `nccl` backend runs:

    trainer rank 0                                 every agent engine's workers
    trainer_init: open the group (rank 0)   <->    init_weight_transfer_engine: join it (rank 1..N)
    send_weights: start_weight_update  ------->    start: layer-wise reload begins
                  update_weights(meta) ------->    receive: one tensor at a time, load_weights
                  broadcast each tensor <------>   (concurrently, inside the same collectives)
                  finish_weight_update ------->    finish: layer-wise reload ends

The group is a `ProcessGroupGloo` on its own TCPStore: no default torch.distributed group is
touched on either side (the trainer's ZeRO group and vLLM's own group stay as they are).
Packed (as `nccl` always is here): the trainer packs the tensors into buckets of `weight_sync.bucket_mb` with vLLM's
own `pack_tensors` and each worker cuts its buckets by the same rule and unpacks them with vLLM's `unpack_tensor`, so
that the bucketing the GPU path ships runs on every CPU commit (the CUDA-stream double buffering around it does not).
vLLM loads `register` in every engine process through the `vllm.general_plugins` entry point
(pyproject.toml); the trainer side registers by importing this module.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar

import torch
from vllm.distributed.weight_transfer.base import WeightTransferEngine, WeightTransferInitInfo
from vllm.distributed.weight_transfer.nccl_engine import (
    NCCLTrainerInitInfo,
    NCCLTrainerWeightTransferEngine,
    NCCLWeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.packed_tensor import DEFAULT_PACKED_BUFFER_SIZE_BYTES, pack_tensors, unpack_tensor

from actors.weights.extension import refresh_tied_lm_head

BACKEND = "gloo"


def _group(host: str, port: int, rank: int, world_size: int, timeout_s: float) -> torch.distributed.ProcessGroupGloo:
    """Rank 0 hosts the store; every rank blocks here until all `world_size` ranks joined. Every wait of the
    group, the joining and each broadcast, gives up after `timeout_s` (weight_sync.timeout_s): an engine
    left waiting by a peer that died mid-transfer is free again for the next sync."""
    timeout = timedelta(seconds=timeout_s)
    store = torch.distributed.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout, use_libuv=False)
    return torch.distributed.ProcessGroupGloo(torch.distributed.PrefixStore("sead-weights", store), rank, world_size,
                                              timeout)


def _broadcast(group: torch.distributed.ProcessGroupGloo, tensor: torch.Tensor) -> None:
    options = torch.distributed.BroadcastOptions()
    options.rootRank = 0
    group.broadcast([tensor], options).wait()


@dataclass
class GlooWeightTransferInitInfo(WeightTransferInitInfo):
    master_address: str
    master_port: int
    rank_offset: int              # group rank of this engine's worker 0
    world_size: int               # 1 (the trainer) + every worker of every engine
    packed: bool = False          # buckets of packed_buffer_size_bytes (else a bucket per tensor)
    packed_buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES
    timeout_s: float = 600.0      # weight_sync.timeout_s


class GlooWeightTransferEngine(WeightTransferEngine[GlooWeightTransferInitInfo, NCCLWeightTransferUpdateInfo]):
    """Worker side: receive each tensor into a fresh buffer and load it (never a second full copy)."""
    init_info_cls = GlooWeightTransferInitInfo
    update_info_cls = NCCLWeightTransferUpdateInfo

    def __init__(self, config, vllm_config, device, model) -> None:
        super().__init__(config, vllm_config, device, model)
        self.group = None
        self.bucket_bytes = 0   # the buckets' size (0, not packed: a bucket per tensor)

    def init_transfer_engine(self, init_info: GlooWeightTransferInitInfo) -> None:
        rank = init_info.rank_offset + self.parallel_config.rank
        self.group = _group(init_info.master_address, init_info.master_port, rank, init_info.world_size,
                            init_info.timeout_s)
        self.bucket_bytes = init_info.packed_buffer_size_bytes if init_info.packed else 0

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload
        initialize_layerwise_reload(self.model)

    def receive_weights(self, update_info: NCCLWeightTransferUpdateInfo) -> None:
        if self.group is None:
            raise RuntimeError("gloo weight transfer: init_weight_transfer_engine was not called")
        tensors = [(name, shape, getattr(torch, dtype_name))
                   for name, dtype_name, shape in zip(update_info.names, update_info.dtype_names, update_info.shapes)]
        for bucket in buckets(tensors, self.bucket_bytes):
            names, shapes, dtypes, sizes = (list(column) for column in zip(*bucket))
            packed = torch.empty(sum(sizes), dtype=torch.uint8)
            _broadcast(self.group, packed)
            self.model.load_weights([(name, weight.to(self.device))
                                     for name, weight in unpack_tensor(packed, names, shapes, dtypes, sizes)])

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload
        finalize_layerwise_reload(self.model, self.model_config)
        refresh_tied_lm_head(self.model)   # after the reload: CPU re-packs the tied lm_head

    def shutdown(self) -> None:
        self.group = None


def buckets(tensors: list, bucket_bytes: int) -> list[list[tuple]]:
    """(name, shape, dtype) -> the packed buckets' (name, shape, dtype, bytes), cut where vLLM's `pack_tensors` cuts:
    a bucket closes after the tensor that takes it past `bucket_bytes`."""
    out, bucket, size = [], [], 0
    for name, shape, dtype in tensors:
        nbytes = math.prod(shape) * dtype.itemsize
        bucket.append((name, shape, dtype, nbytes))
        size += nbytes
        if size > bucket_bytes:
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket else [])


@dataclass
class GlooTrainerInitInfo(NCCLTrainerInitInfo):
    backend: ClassVar[str] = BACKEND
    timeout_s: float = 600.0


class GlooTrainerWeightTransferEngine(NCCLTrainerWeightTransferEngine):
    """Trainer side: vLLM's NCCL sender (metadata, start, update_weights concurrently with the
    broadcast, finish) over a gloo group instead of a NCCL communicator."""
    init_info_cls = GlooTrainerInitInfo

    @classmethod
    def trainer_init(cls, init_info: GlooTrainerInitInfo, *, client, source=None):
        from concurrent.futures import ThreadPoolExecutor
        from dataclasses import asdict
        if source is None:
            raise ValueError("gloo trainer weight transfer needs a WeightSource")
        engine = cls(client=client, source=source, is_sender=init_info.is_sender, packed=init_info.packed,
                     packed_buffer_size_bytes=init_info.packed_buffer_size_bytes)
        if not engine.is_sender:
            return engine
        worker_info = GlooWeightTransferInitInfo(init_info.master_address, init_info.master_port, 1,
                                                 init_info.world_size, init_info.packed,
                                                 init_info.packed_buffer_size_bytes, init_info.timeout_s)
        # The workers block in init until every rank joined: join as rank 0 while they do.
        with ThreadPoolExecutor(max_workers=1) as pool:
            joined = pool.submit(engine.client.init_weight_transfer_engine, asdict(worker_info))
            engine.model_update_group = _group(init_info.master_address, init_info.master_port, 0,
                                               init_info.world_size, init_info.timeout_s)
            joined.result()
        return engine

    def _broadcast(self, source, meta) -> None:
        if not self.is_sender:
            for _ in source:
                pass
            return
        pairs = self._checked_iter(source, meta)
        bucket_bytes = self.packed_buffer_size_bytes if self.packed else 0   # not packed: a bucket per tensor
        while (chunk := pack_tensors(pairs, lambda item: item[1].detach().to("cpu"), bucket_bytes)):
            _broadcast(self.model_update_group, chunk.packed_tensor)

    def shutdown(self) -> None:
        self.model_update_group = None


def register() -> None:
    """vLLM plugin entry point (`vllm.general_plugins`); safe to call more than once per process."""
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory
    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, __name__, "GlooWeightTransferEngine")
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, __name__, "GlooTrainerWeightTransferEngine")
