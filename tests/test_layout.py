"""The layout's rules, checked: the algorithm imports without Ray, vLLM or DeepSpeed; only
sead_ray.launch reaches into actors/; no module grows past what one reader can hold."""
import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PURE = ["sead_ray.loop", "sead_ray.rollout", "sead_ray.grpo", "sead_ray.checkpoint", "sead_ray.trainer_protocol",
        "sead_ray.controller", "sead_ray.dialogue", "sead_ray.metrics", "sead_ray.cli", "sead_ray.launch"]


def test_the_algorithm_imports_without_ray_vllm_or_deepspeed():
    code = (f"import sys; import {', '.join(PURE)}; "
            "print(sorted(m for m in ('ray', 'vllm', 'deepspeed') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _imported_modules(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_only_launch_imports_actors():
    offenders = {str(p.relative_to(ROOT)) for p in (ROOT / "sead_ray").rglob("*.py")
                 if any(m == "actors" or m.startswith("actors.") for m in _imported_modules(p))}
    assert offenders == {"sead_ray/launch.py"}


@pytest.mark.parametrize("package", ["sead_ray", "actors", "placement"])
def test_modules_stay_readable(package):
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / package).rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > 400} == {}
