"""`sead-ray doctor` on a real local Ray cluster, as a user runs it before a first run: every part of the embedded
config works here, and a placement group that cannot be made is one FAIL line and exit 2. Whether this host's disk
holds the embedded run's checkpoints is the host's, not the code's: the storage line is checked against the free
space the test itself reads (a short disk fails only that line; the parts after it still run)."""
import shutil
import subprocess
import sys
import time

from sead_ray.core.models import resolve_model
from sead_ray.ops.model_shape import reference_shape
from sead_ray.runs.doctor import PARTS, run_disk_bytes
from sead_ray.runs.inputs import load
from tests.conftest import EMBEDDED_CONFIG, ROOT


def doctor(tmp_path, *overrides: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sead_ray.cli.main", "doctor", "--config", str(EMBEDDED_CONFIG),
                           "--set", f"output_dir={tmp_path}", "--set", "ray.dashboard=false",
                           *(a for o in overrides for a in ("--set", o))],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    return proc, time.perf_counter() - t0


def part_lines(proc: subprocess.CompletedProcess) -> dict[str, str]:
    return {line.split()[1]: line for line in proc.stdout.splitlines() if line.split()[:1] in (["ok"], ["FAIL"], ["--"])}


def disk_short(tmp_path) -> bool:
    """Whether this host's disk is too small for the embedded run's checkpoints (the doctor's storage FAIL)."""
    cfg, _ = load(str(EMBEDDED_CONFIG), [f"output_dir={tmp_path}"])
    return shutil.disk_usage(tmp_path).free < run_disk_bytes(cfg, [reference_shape(str(resolve_model(cfg.models.agent)))])


def test_doctor_passes_every_part_of_the_embedded_config(tmp_path):
    short = disk_short(tmp_path)
    proc, seconds = doctor(tmp_path)
    assert proc.returncode == (2 if short else 0), proc.stdout + proc.stderr[-3000:]
    lines = part_lines(proc)
    assert list(lines) == list(PARTS), proc.stdout
    assert [p for p, line in lines.items() if not line.startswith("ok")] == (["storage"] if short else []), proc.stdout
    assert "digests equal" in lines["sync"] and "one greedy call" in lines["call"]
    assert "none asked" in lines["gpus"]
    assert proc.stdout.splitlines()[-1].startswith("doctor: storage FAILED" if short
                                                   else f"doctor: all {len(PARTS)} parts work")
    assert list(tmp_path.iterdir()) == []   # its scratch run directory is gone
    print(f"doctor on the embedded config: {seconds:.0f} s")


def test_doctor_names_a_placement_group_that_cannot_be_made(tmp_path):
    short = disk_short(tmp_path)
    proc, _ = doctor(tmp_path, "agent.engines=64")
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    lines = part_lines(proc)
    assert [p for p, line in lines.items() if line.startswith("FAIL")] == ["storage"] * short + ["placement"]
    assert all(lines[p].startswith("ok") for p in PARTS[:PARTS.index("placement")] if not (short and p == "storage"))
    assert all(lines[p].startswith("--") for p in PARTS[PARTS.index("placement") + 1:])
    assert "agent" in lines["placement"] and "fix:" in lines["placement"]
