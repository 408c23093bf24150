"""The packed gloo weight transfer cuts its buckets where vLLM's own `pack_tensors` (the GPU path's bucketing) cuts
them, and vLLM's `unpack_tensor` gives back every tensor bit for bit: the worker side (actors/weights/gloo.py
`buckets`) must agree with the trainer side, which packs with vLLM's function, or the collective sizes differ."""
import pytest
import torch
from vllm.distributed.weight_transfer.packed_tensor import pack_tensors, unpack_tensor

from actors.weights.gloo import buckets


def _chunks(named: list[tuple[str, torch.Tensor]], bucket_bytes: int) -> list:
    pairs, out = iter(named), []
    while (chunk := pack_tensors(pairs, lambda item: item[1], bucket_bytes)):
        out.append(chunk)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])   # a model's weights share one dtype
def test_the_workers_buckets_are_the_trainers_and_unpack_exactly(dtype):
    g = torch.Generator().manual_seed(0)
    shapes = [(7, 5), (301,), (64, 64), (3,), (128, 33), (1,), (1000,), (2, 2, 2)]
    named = [(f"layer{i}.weight", torch.randn(shape, generator=g).to(dtype)) for i, shape in enumerate(shapes)]
    exact = sum(t.numel() * t.element_size() for _, t in named[:2])   # a bucket filled to the byte stays open
    for bucket_bytes in (1, 1000, exact, 4096, 20000, 1 << 30):
        sent = _chunks(named, bucket_bytes)
        cut = buckets([(n, list(t.shape), t.dtype) for n, t in named], bucket_bytes)
        assert [c.names for c in sent] == [[n for n, *_ in b] for b in cut], bucket_bytes
        assert [c.packed_tensor.numel() for c in sent] == [sum(b[3] for b in bucket) for bucket in cut]
        received = {}
        for chunk, bucket in zip(sent, cut):
            names, shapes_, dtypes_, sizes = (list(column) for column in zip(*bucket))
            received.update(unpack_tensor(chunk.packed_tensor.clone(), names, shapes_, dtypes_, sizes))
        assert all(torch.equal(received[n], t) and received[n].dtype == t.dtype for n, t in named)
    assert len(_chunks(named, 1)) == len(named) and len(_chunks(named, 1 << 30)) == 1
