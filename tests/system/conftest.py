"""End-to-end runs: real Ray clusters, vLLM engines, DeepSpeed trainers, servers (`pytest -m system`)."""
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.system)
