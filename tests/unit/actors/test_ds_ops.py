"""DeepSpeed's CPU op build gets past a build that was killed: torch's lock file is left behind by a killed
builder, ours dies with its holder (a run once hung at start on such a file, its trainer idle)."""
import subprocess
import sys
import threading

from actors.ds_ops import SHM_OP, build_lock, clear_stale_build_locks
from tests.conftest import ROOT


def test_a_killed_builders_torch_lock_is_removed_and_no_other(tmp_path):
    stale = tmp_path / "py311_cpu" / SHM_OP / "lock"
    other = tmp_path / "py311_cpu" / "another_op" / "lock"
    for lock in (stale, other):
        lock.parent.mkdir(parents=True)
        lock.touch()
    (stale.parent / "deepspeed_shm_comm.so").touch()
    assert clear_stale_build_locks(tmp_path) == [stale]
    assert not stale.exists() and other.exists() and (stale.parent / "deepspeed_shm_comm.so").exists()
    assert clear_stale_build_locks(tmp_path) == []


def test_our_build_lock_excludes_a_second_builder_and_dies_with_its_holder(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, pathlib\nfrom actors.ds_ops import build_lock\n"
         f"with build_lock(pathlib.Path({str(tmp_path)!r})):\n    print('held', flush=True)\n    time.sleep(600)"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        acquired = threading.Event()

        def second_builder():
            with build_lock(tmp_path):
                acquired.set()
        waiter = threading.Thread(target=second_builder, daemon=True)
        waiter.start()
        assert not acquired.wait(1.0), "a second builder got the lock while the first held it"
        holder.kill()   # as a run stopped mid-build: no clean-up runs
        assert acquired.wait(30), "the lock outlived its killed holder"
    finally:
        holder.kill()
        holder.wait()
