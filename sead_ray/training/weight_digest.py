"""Weight digests: a cheap fingerprint of every tensor a weight sync moves, taken by the trainer's sender over
what it sends and by each engine over what it received, so that a sync whose bytes went wrong fails instead of
serving other weights than the trainer's (`weight_sync.verify`).

A tensor's digest is its element count, the float64 sum of its elements and the float64 sum of their squares.
Both sides digest the tensors under the names the trainer sent them (HF checkpoint names), before the engine's
loader fuses or re-packs them (qkv_proj, gate_up_proj), so the two line up name by name on every transport.
Pure: torch is imported where a tensor is digested.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

VERIFY_MODES = ("every", "first", "off")   # weight_sync.verify

# Both sides add the very same values: every bf16, fp16 and fp32 element and its square is exact in float64, so
# the digests of equal tensors differ only by float64 rounding in another summation order (another device,
# kernel or thread count): about 1e-16 x the depth of the reduction, under 1e-12 even for a billion elements.
# One tolerance fits every dtype, 1e-9: three orders above that noise, and still sensitive to one element of
# the largest tensor (a 152k x 5k embedding) changed by a few hundredths, or to any whole chunk gone wrong.
DIGEST_RTOL = 1e-9
_CHUNK = 1 << 22   # elements converted to float64 at a time: 32 MB, whatever the tensor's size


class TensorDigest(NamedTuple):
    numel: int
    sum: float
    sumsq: float


def tensor_digest(tensor: Any) -> TensorDigest:
    """The digest of one tensor, computed on its own device in float64 (a chunk at a time, so a 1.5 GB
    embedding never has a float64 copy)."""
    import torch
    flat = tensor.detach().reshape(-1)
    total = torch.zeros((), dtype=torch.float64, device=flat.device)
    squares = torch.zeros((), dtype=torch.float64, device=flat.device)
    for chunk in flat.split(_CHUNK):
        wide = chunk.to(torch.float64)
        total += wide.sum()
        squares += torch.dot(wide, wide)
    return TensorDigest(flat.numel(), float(total), float(squares))


@dataclass
class DigestRecorder:
    """The digests of the tensors seen so far (by name), and the seconds spent taking them."""
    digest: dict[str, TensorDigest] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, name: str, tensor: Any) -> None:
        t0 = time.perf_counter()
        self.digest[name] = tensor_digest(tensor)
        self.seconds += time.perf_counter() - t0

    def add_all(self, pairs: Iterable[tuple[str, Any]]) -> None:
        for name, tensor in pairs:
            self.add(name, tensor)

    # vLLM returns a worker's answer to the engine as msgpack, which knows lists, dicts and numbers only
    def to_plain(self) -> dict:
        return {"digest": {name: list(d) for name, d in self.digest.items()}, "seconds": self.seconds}

    @classmethod
    def from_plain(cls, plain: dict) -> DigestRecorder:
        return cls({name: TensorDigest(int(n), float(s), float(q)) for name, (n, s, q) in plain["digest"].items()},
                   float(plain["seconds"]))


class DigestedSource:
    """A weight source (actors.weights.senders.WeightSource) that digests each tensor as it passes on its way to
    the transport: what rank 0 sends. `record` False (other ranks, whose tensors are None, or a sync not
    verified): passed through untouched."""

    def __init__(self, source: Any, record: bool):
        self.source = source
        self.recorder = DigestRecorder() if record else None

    def metadata(self) -> list:
        return self.source.metadata()

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name, tensor in self.source:
            if self.recorder is not None and tensor is not None:
                self.recorder.add(name, tensor)
            yield name, tensor


class SyncChecks:
    """Which syncs of one transport compare digests (weight_sync.verify): `every` one; `first`: until one sync to its
    engines was seen to arrive intact (a transport is built anew for a changed list of engines, so a replacement's
    first sync is checked, and so is the sync again after a mismatch); `off`: none."""

    def __init__(self, mode: str):
        if mode not in VERIFY_MODES:
            raise ValueError(f"weight_sync.verify = {mode!r} (one of {', '.join(VERIFY_MODES)})")
        self.mode, self.proven = mode, False   # proven: a sync to these engines arrived intact

    def this_sync(self) -> bool:
        """Whether the next sync is checked."""
        return self.mode == "every" or (self.mode == "first" and not self.proven)

    def seen(self, result: Any) -> Any:
        """A sync's SyncResult, noted (its `verified`) and handed back."""
        self.proven = self.proven or result.verified is True
        return result


def _close(a: float, b: float, tolerance: float) -> bool:
    return a == b or abs(a - b) <= tolerance or (math.isnan(a) and math.isnan(b))


def _describe(name: str, sent: TensorDigest, got: TensorDigest) -> str:
    if sent.numel != got.numel:
        return f"{name} ({sent.numel} elements sent, {got.numel} received)"
    return f"{name} (sum {sent.sum:.9g} sent, {got.sum:.9g} received; sum of squares {sent.sumsq:.9g}, {got.sumsq:.9g})"


def compare_digests(sent: dict[str, TensorDigest], received: dict[str, TensorDigest],
                    rtol: float = DIGEST_RTOL) -> list[str]:
    """What differs between the digest of what was sent and of what was received, one line per tensor (its
    name first): a tensor whose count, sum or sum of squares differs, a tensor sent and not received
    ("missing"), received and not sent ("unexpected"). Empty: the same weights."""
    problems = []
    for name, s in sent.items():
        r = received.get(name)
        if r is None:
            problems.append(f"{name} (missing: sent, not received)")
            continue
        largest = max(abs(s.sumsq), abs(r.sumsq))
        # |sum| <= sqrt(numel x sum of squares): the scale of the sum's rounding, whatever its cancellation
        if (s.numel != r.numel or not _close(s.sumsq, r.sumsq, rtol * largest)
                or not _close(s.sum, r.sum, rtol * math.sqrt(s.numel * largest))):
            problems.append(_describe(name, s, r))
    problems += [f"{name} (unexpected: received, not sent)" for name in received if name not in sent]
    return problems


def verification(sent: DigestRecorder | None, received: Sequence[Sequence[DigestRecorder] | None]) -> dict[str, Any]:
    """SyncResult's verification fields (sead_ray.training.trainer_protocol) from the sender's recorder and, for each
    engine, its workers' (a tensor-parallel engine's workers each receive every tensor): `sent` None, a sync not
    verified, gives none of them. An engine that sent back no digest counts as a mismatch."""
    if sent is None:
        return {}
    mismatched = []
    for i, workers in enumerate(received):
        if not workers:
            mismatched.append(f"engine {i}: no digest came back")
        for w, got in enumerate(workers or []):
            label = f"engine {i}" + (f" worker {w}" if len(workers) > 1 else "")
            mismatched += [f"{label}: {line}" for line in compare_digests(sent.digest, got.digest)]
    slowest = max((got.seconds for workers in received for got in workers or []), default=0.0)
    return {"verified": not mismatched, "mismatched": mismatched, "sent_digest": digest_summary(sent.digest),
            "digest_s": sent.seconds + slowest}


def digest_summary(digest: dict[str, TensorDigest]) -> tuple[float, float]:
    """One pair for a whole digest, to log and to compare by eye: the sum and the sum of squares of every element."""
    return math.fsum(d.sum for d in digest.values()), math.fsum(d.sumsq for d in digest.values())
