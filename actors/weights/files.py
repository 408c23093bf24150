"""Weight files in shared memory: private to this user, swept when their writer died, and for the `shm`
transport one file per trainer written in place version after version and read by the engines
without a copy.

The files are plain safetensors (8-byte header length, JSON header, tensors back to back), so anything
that reads safetensors reads them; `SharedWeightFile` and `map_weight_file` only skip the copies that
`safetensors.torch.save_file` / `load_file` make (serialising to bytes, reading into new tensors) and
the page faults of a new file per version: the trainer copies each parameter straight into the mapped
file, the engine's loader copies straight out of it.
"""
from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import shutil
import struct
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)

_WEIGHT_FILE = re.compile(r"^sead-(?:weights|recv)-(\d+)-v\d+-.*\.safetensors$")
_swept = False

# torch dtype name -> safetensors dtype tag
_TAGS = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int64": "I64",
         "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def discard(path: str) -> None:
    try:
        Path(path).unlink()
    except FileNotFoundError:
        pass


def sweep_stale_weight_files(directory: Optional[str] = None) -> list[str]:
    """Remove this user's weight files whose writing process is gone (a killed run leaves its last
    version in shared memory, RAM that nothing frees); the writer's pid is in the name."""
    directory = directory or shm_dir()
    removed = []
    for name in os.listdir(directory):
        match = _WEIGHT_FILE.match(name)
        path = os.path.join(directory, name)
        if not match or int(match.group(1)) == os.getpid():
            continue
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(int(match.group(1)), 0)   # the writer lives: leave its file
        except ProcessLookupError:
            discard(path)
            removed.append(path)
        except (PermissionError, FileNotFoundError):
            continue
    if removed:
        log.info("removed %d stale weight file(s) of dead processes from %s", len(removed), directory)
    return removed


def new_private_file(kind: str, version: int, nbytes: int) -> str:
    """A new empty file in shared memory that only this user can read (mkstemp: mode 0600 and an
    unguessable name, so no other local user can read or swap the weights an engine loads), after
    checking that `nbytes` fit; the first file of a process sweeps stale files of dead writers."""
    global _swept
    directory = shm_dir()
    if not _swept:
        _swept = True
        sweep_stale_weight_files(directory)
    need, free = nbytes + (1 << 20), shutil.disk_usage(directory).free
    if need > free:
        raise OSError(errno.ENOSPC, f"weights v{version} need {need / 2**20:.0f} MB in {directory}, "
                                    f"{free / 2**20:.0f} MB free")
    fd, path = tempfile.mkstemp(prefix=f"sead-{kind}-{os.getpid()}-v{version}-", suffix=".safetensors", dir=directory)
    os.close(fd)
    return path


def write_private_weights(tensors: dict, kind: str, version: int) -> str:
    """Save tensors to a new private file in shared memory; the file is removed again if writing fails."""
    from safetensors.torch import save_file
    path = new_private_file(kind, version, nbytes_of(tensors.values()))
    try:
        save_file(tensors, path)
    except BaseException:
        discard(path)
        raise
    return path


def nbytes_of(tensors: Iterable[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def tensor_nbytes(dtype: Any, shape: Iterable[int]) -> int:
    """Bytes of a tensor of `dtype` and `shape` (a torch dtype; no tensor needed)."""
    return math.prod(int(d) for d in shape) * dtype.itemsize


def safetensors_header(specs: Iterable[tuple[str, Any, tuple]]) -> tuple[bytes, dict]:
    """The header of a safetensors file holding tensors `(name, torch dtype, shape)`, and its entries
    (dtype tag, shape, (start, end) in the data after the header). Larger elements first, so every tensor
    is aligned to its element size (the header is padded to 8 bytes, and the format allows no gaps)."""
    entries, at = {}, 0
    for name, dtype, shape in sorted(specs, key=lambda s: (-s[1].itemsize, s[0])):
        end = at + tensor_nbytes(dtype, shape)
        entries[name] = {"dtype": _TAGS[str(dtype).removeprefix("torch.")], "shape": [int(d) for d in shape],
                         "data_offsets": [at, end]}
        at = end
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header, entries


def _typed_views(buffer: Any, header_len: int, entries: dict) -> dict:
    """Views of a mapped file's bytes as the tensors its header names (no copy)."""
    import torch
    dtypes = {tag: getattr(torch, name) for name, tag in _TAGS.items()}
    views = {}
    for name, e in entries.items():
        start, end = e["data_offsets"]
        raw = buffer[header_len + start:header_len + end]
        views[name] = raw.view(dtypes[e["dtype"]]).view(e["shape"])
    return views


class SharedWeightFile:
    """The `shm` transport's file: created once for the model's parameter list (`(name, dtype, shape)`),
    mapped, and overwritten in place by `write` for every version. Removed by `close()`, when the
    object is collected or at exit; a SIGKILLed writer's file is swept by the next run."""

    def __init__(self, specs: list[tuple[str, Any, tuple]], version: int):
        import torch
        header, entries = safetensors_header(specs)
        self.nbytes = max((e["data_offsets"][1] for e in entries.values()), default=0)
        self.path = new_private_file("weights", version, len(header) + self.nbytes)
        self._finalizer = weakref.finalize(self, discard, self.path)
        try:
            with open(self.path, "r+b") as f:
                f.write(header)
                f.truncate(len(header) + self.nbytes)
            mapped = torch.from_file(self.path, shared=True, size=len(header) + self.nbytes, dtype=torch.uint8)
            self.views = _typed_views(mapped, len(header), entries)
        except BaseException:
            self.close()
            raise

    def write(self, pairs: Iterable[tuple[str, Any]]) -> int:
        """Copy every `(name, tensor)` into its place (a tensor of another device is copied from there);
        returns the bytes written. Every parameter of the layout must come."""
        written = set()
        for name, tensor in pairs:
            view = self.views.get(name)
            if view is None or tuple(view.shape) != tuple(tensor.shape):
                raise ValueError(f"weight {name!r} {tuple(tensor.shape)} is not in the file's layout "
                                 f"({'absent' if view is None else tuple(view.shape)})")
            view.copy_(tensor.detach())
            written.add(name)
        missing = set(self.views) - written
        if missing:
            raise ValueError(f"{len(missing)} weight(s) of the layout were not sent, e.g. {sorted(missing)[:3]}")
        return self.nbytes

    def close(self) -> None:
        self.views = {}
        self._finalizer()


def map_weight_file(path: str) -> dict:
    """The tensors of a safetensors file as views of its mapped bytes: nothing is read until used, and
    a file in shared memory is read where it lies. The mapping lives as long as the views."""
    import torch
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        entries = json.loads(f.read(n))
    entries.pop("__metadata__", None)
    size = os.path.getsize(path)
    mapped = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
    return _typed_views(mapped, 8 + n, entries)
