"""DeepSpeed's JIT-built CPU op (its shared-memory collective), built once by `make setup` and loaded by every
training rank: all of them must build it with the same `ninja`."""
from __future__ import annotations

import os
import sys


def own_ninja_first() -> None:
    """Put this environment's bin folder (the `ninja` DeepSpeed and vLLM install) first on PATH. DeepSpeed
    JIT-builds its CPU collective op with the first `ninja` on PATH, and two ninja versions (the venv's and
    a system one) read each other's build log as a changed command: each switch rebuilt the op (35-100 s),
    e.g. between a `ray start` from an activated venv and a run started without it."""
    own = os.path.dirname(sys.executable)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != own:
        os.environ["PATH"] = os.pathsep.join([own, os.environ.get("PATH", "")])
