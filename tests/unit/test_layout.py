"""The layout's rules, checked: the algorithm imports without Ray, vLLM or DeepSpeed; only sead_ray.runs
reaches into actors/; the packages' import graph has no circle and no arrow up a layer; no module grows past
what one reader can hold."""
import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PURE = ["sead_ray.training.loop", "sead_ray.play.rollout", "sead_ray.training.grpo", "sead_ray.training.checkpoint",
        "sead_ray.training.trainer_protocol", "sead_ray.curriculum.controller", "sead_ray.play.dialogue",
        "sead_ray.evaluation.metrics", "sead_ray.user.simulators", "sead_ray.cli.main", "sead_ray.runs.train",
        "sead_ray.runs.evaluate", "sead_ray.runs.serve"]


def test_the_algorithm_imports_without_ray_vllm_or_deepspeed():
    code = (f"import sys; import {', '.join(PURE)}; "
            "print(sorted(m for m in ('ray', 'vllm', 'deepspeed') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _imported_modules(path, package=""):
    """Every module `path` imports, at its top or inside a function (relative imports resolved against `package`)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and package:
            parts = package.split(".")[:len(package.split(".")) - node.level + 1] + ([node.module] if node.module else [])
            yield ".".join(parts)
            yield from (f"{'.'.join(parts)}.{a.name}" for a in node.names)


def test_only_runs_imports_actors():
    offenders = {str(p.relative_to(ROOT)) for p in (ROOT / "sead_ray").rglob("*.py")
                 if any(m == "actors" or m.startswith("actors.") for m in _imported_modules(p))}
    assert offenders and all(p.startswith("sead_ray/runs/") for p in offenders), offenders


def test_sead_ray_is_packages_over_a_handful_of_top_level_modules():
    top = sorted(p.name for p in (ROOT / "sead_ray").glob("*.py"))
    assert top == ["__init__.py"]
    unplaced = [d.name for d in (ROOT / "sead_ray").iterdir()
                if (d / "__init__.py").is_file() and f"sead_ray.{d.name}" not in LAYER_OF]
    assert unplaced == [], "packages in no layer of LAYERS"


@pytest.mark.parametrize("package", ["sead_ray", "actors", "placement"])
def test_modules_stay_readable(package):
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / package).rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > 400} == {}


# Lowest first: packages, by SEAD's parts. A module may import from its own layer and the ones below, never
# from above: the core knows no scenario, the players no call, a call no loop, the loop no command line.
LAYERS = [
    ("core", ["sead_ray", "sead_ray.core", "placement"]),
    ("scenario", ["sead_ray.scenario"]),
    ("players", ["sead_ray.curriculum", "sead_ray.user", "sead_ray.agent"]),
    ("play", ["sead_ray.play"]),
    ("learn and judge", ["sead_ray.training", "sead_ray.evaluation", "sead_ray.ops"]),
    ("drive", ["actors", "sead_ray.runs"]),
    ("command line", ["sead_ray.view", "sead_ray.cli"]),
]
LAYER_OF = {package: i for i, (_, packages) in enumerate(LAYERS) for package in packages}


def _import_graph(root=ROOT) -> dict[str, set[str]]:
    """Our modules and the modules of ours each imports (a name imported from a module counts as the module)."""
    files = {}
    for package in ("sead_ray", "actors", "placement"):
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for imported in _imported_modules(path, package):
            while imported and imported not in files:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def _layer(module: str) -> int:
    """The layer of the package `module` is in (or is: `sead_ray` itself, a top-level package)."""
    parts = module.split(".")
    package = ".".join(parts[:2]) if parts[0] == "sead_ray" and len(parts) > 1 else parts[0]
    assert package in LAYER_OF, f"{module}: its package {package} is in no layer of tests/unit/test_layout.py: place it"
    return LAYER_OF[package]


def test_the_import_graph_has_no_circle():
    graph, done, on_path = _import_graph(), set(), []

    def visit(module):
        if module in on_path:
            raise AssertionError("import circle: " + " -> ".join(on_path[on_path.index(module):] + [module]))
        if module in done:
            return
        on_path.append(module)
        for target in sorted(graph[module]):
            visit(target)
        on_path.pop()
        done.add(module)
    for module in sorted(graph):
        visit(module)


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{m} ({LAYERS[_layer(m)][0]}) -> {t} ({LAYERS[_layer(t)][0]})"
                  for m, targets in graph.items() for t in targets if _layer(t) > _layer(m))


def test_no_module_imports_from_a_layer_above_its_own():
    assert _upward_imports(_import_graph()) == []


def test_an_injected_upward_import_is_caught(tmp_path):
    """The check can fail: a copy of the tree where the core imports the loop."""
    import shutil
    for package in ("sead_ray", "actors", "placement"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "static", "data"))
    jsonl = tmp_path / "sead_ray" / "core" / "jsonl.py"
    jsonl.write_text(jsonl.read_text() + "\n\ndef _late():\n    from sead_ray.training.loop import SelfEvolutionLoop\n")
    assert _upward_imports(_import_graph(tmp_path)) == [
        "sead_ray.core.jsonl (core) -> sead_ray.training.loop (learn and judge)"]
