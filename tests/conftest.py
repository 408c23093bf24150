"""Shared fixtures. Real parts, small sizes: the default scenario, the real SmolLM2 tokenizer."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_CONFIG = ROOT / "configs" / "embedded.yaml"
SCENARIO = ROOT / "configs" / "scenarios" / "restaurant_promotion.yaml"


@pytest.fixture(scope="session")
def scenario():
    from sead_ray.scenario import load_scenario
    return load_scenario(SCENARIO)


@pytest.fixture(scope="session")
def schema(scenario):
    return scenario.schema


@pytest.fixture(scope="session")
def smollm_tokenizer():
    from transformers import AutoTokenizer
    from sead_ray.models import prepare_embedded
    return AutoTokenizer.from_pretrained(prepare_embedded())
