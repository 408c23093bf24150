"""`sead-ray doctor` on a real local Ray cluster, as a user runs it before a first run: every part of the embedded
config works here, and a placement group that cannot be made is one FAIL line and exit 2."""
import subprocess
import sys
import time

from sead_ray.runs.doctor import PARTS
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


def test_doctor_passes_every_part_of_the_embedded_config(tmp_path):
    proc, seconds = doctor(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = part_lines(proc)
    assert list(lines) == list(PARTS) and all(line.startswith("ok") for line in lines.values()), proc.stdout
    assert "digests equal" in lines["sync"] and "one greedy call" in lines["call"]
    assert "none asked" in lines["gpus"]
    assert proc.stdout.splitlines()[-1].startswith(f"doctor: all {len(PARTS)} parts work")
    assert list(tmp_path.iterdir()) == []   # its scratch run directory is gone
    print(f"doctor on the embedded config: {seconds:.0f} s")


def test_doctor_names_a_placement_group_that_cannot_be_made(tmp_path):
    proc, _ = doctor(tmp_path, "agent.engines=64")
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    lines = part_lines(proc)
    assert [p for p, line in lines.items() if line.startswith("FAIL")] == ["placement"]
    assert all(lines[p].startswith("ok") for p in PARTS[:PARTS.index("placement")])
    assert all(lines[p].startswith("--") for p in PARTS[PARTS.index("placement") + 1:])
    assert "agent" in lines["placement"] and "fix:" in lines["placement"]
