"""DeepSpeed's JIT-built CPU op (its shared-memory collective), built once by `make setup` and loaded by every
training rank: all of them must build it with the same `ninja`, one at a time, past a build that was killed."""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)


def own_ninja_first() -> None:
    """Put this environment's bin folder (the `ninja` DeepSpeed and vLLM install) first on PATH. DeepSpeed
    JIT-builds its CPU collective op with the first `ninja` on PATH, and two ninja versions (the venv's and
    a system one) read each other's build log as a changed command: each switch rebuilt the op (35-100 s),
    e.g. between a `ray start` from an activated venv and a run started without it."""
    own = os.path.dirname(sys.executable)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != own:
        os.environ["PATH"] = os.pathsep.join([own, os.environ.get("PATH", "")])


SHM_OP = "deepspeed_shm_comm"   # DeepSpeed's ShareMemCommBuilder.NAME


def clear_stale_build_locks(build_root: Path, op_name: str = SHM_OP) -> list[Path]:
    """Remove torch's build lock of `op_name` if one is left (call it holding `build_lock`). torch's is a plain
    file, so a rank killed mid-build (a run stopped at that moment) leaves it behind and every later run waits on
    it forever (seen: a run hung at start, its trainer idle, after an earlier run was killed while rebuilding the
    op). Every builder of ours takes `build_lock` first, so a torch lock found under it has no live holder.
    Returns the locks removed; the caller builds before releasing."""
    removed = []
    for stale in sorted(build_root.glob(f"*/{op_name}/lock")):
        stale.unlink(missing_ok=True)
        removed.append(stale)
    return removed


@contextlib.contextmanager
def build_lock(build_root: Path) -> Iterator[None]:
    """Our builders' lock: one at a time, and the kernel drops it with its holder."""
    build_root.mkdir(parents=True, exist_ok=True)
    with open(build_root / "sead-ray-build.flock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)   # released when the file closes or its process dies
        yield


def build_collective_op() -> bool:
    """Build (once, cached afterwards) or load DeepSpeed's CPU collective op with our own `ninja`, so that
    `deepspeed.init_distributed` later finds it loaded. False where the accelerator has no such op."""
    own_ninja_first()
    from deepspeed.comm.torch import build_shm_op
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(get_default_build_root())
    with build_lock(root):
        for stale in clear_stale_build_locks(root):
            logger.warning("removed %s: a build of DeepSpeed's CPU op was killed before it finished", stale)
        return build_shm_op() is not None
