"""The layout's rules, checked: the algorithm imports without Ray, vLLM or DeepSpeed; only
sead_ray.launch reaches into actors/; the import graph has no circle and no arrow up a layer; no
module grows past what one reader can hold."""
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


def test_only_launch_imports_actors():
    offenders = {str(p.relative_to(ROOT)) for p in (ROOT / "sead_ray").rglob("*.py")
                 if any(m == "actors" or m.startswith("actors.") for m in _imported_modules(p))}
    assert offenders == {"sead_ray/launch.py"}


@pytest.mark.parametrize("package", ["sead_ray", "actors", "placement"])
def test_modules_stay_readable(package):
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / package).rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > 400} == {}


# Lowest first. A module may import from its own layer and the ones below, never from above: the
# contracts know no players, the players no loop, the loop no command line.
LAYERS = [
    ("contracts", ["sead_ray", "sead_ray.typed_load", "sead_ray.config_schema", "sead_ray.trainer_protocol",
                   "sead_ray.jsonl", "sead_ray.state", "sead_ray.tokens", "sead_ray.speech", "sead_ray.significance",
                   "sead_ray.models", "sead_ray.dashboard", "sead_ray.prompts.parsing", "placement", "placement.groups"]),
    ("config and scenario", ["sead_ray.config", "sead_ray.concerns", "sead_ray.sim_rules", "sead_ray.scenario",
                             "sead_ray.profiles", "sead_ray.turn_protocol", "sead_ray.curriculum", "sead_ray.metrics",
                             "sead_ray.memory_plan", "sead_ray.grpo", "sead_ray.checkpoint", "sead_ray.report",
                             "sead_ray.compare"]),
    ("players", ["sead_ray.prompts", "sead_ray.prompts.agent", "sead_ray.prompts.user", "sead_ray.rule_user",
                 "sead_ray.judge", "sead_ray.serving", "sead_ray.controller", "sead_ray.battery"]),
    ("play", ["sead_ray.dialogue", "sead_ray.endpoint", "sead_ray.rollout", "sead_ray.simcheck"]),
    ("drive", ["sead_ray.loop", "sead_ray.monitor", "sead_ray.launch", "actors"]),
    ("command line", ["sead_ray.cli", "sead_ray.cli_args", "sead_ray.cli_inputs", "sead_ray.ablate", "sead_ray.view"]),
]


def _import_graph() -> dict[str, set[str]]:
    """Our modules and the modules of ours each imports (a name imported from a module counts as the module)."""
    files = {}
    for package in ("sead_ray", "actors", "placement"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
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
    """The layer of the longest listed name that is `module` or a package above it."""
    best = max(((len(m), i) for i, (_, mods) in enumerate(LAYERS) for m in mods
                if module == m or module.startswith(m + ".")), default=None)
    assert best is not None, f"{module} is in no layer of tests/test_layout.py: place it"
    return best[1]


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


def test_no_module_imports_from_a_layer_above_its_own():
    upward = sorted(f"{m} ({LAYERS[_layer(m)][0]}) -> {t} ({LAYERS[_layer(t)][0]})"
                    for m, targets in _import_graph().items() for t in targets if _layer(t) > _layer(m))
    assert upward == []
