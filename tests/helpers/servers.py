"""Servers the tests start as processes of their own: a free local port, and a server process that is
waited for until it answers and is stopped (its whole process group) afterwards."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server_process(cmd: list[str], log: Path, ready: Callable[[], bool], env: Optional[dict] = None,
                   timeout_s: float = 600, stop_wait_s: float = 120) -> Iterator[subprocess.Popen]:
    """Start `cmd` (output into `log`, its own session), wait until `ready()`; on exit SIGTERM the server
    (as `kill PID` does: a SIGTERM to its whole group would also stop the Ray cluster it is still shutting
    down, and `serve.shutdown()` then waits 30 s for a controller already gone), SIGKILL whatever of its
    group is left once it has exited or after `stop_wait_s`. A server that dies or is not ready in time
    fails with its log's end."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.time() + timeout_s
        while not ready():
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        yield proc
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=stop_wait_s)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
