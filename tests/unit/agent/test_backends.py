import asyncio

import pytest

from sead_ray.agent.backends import AGENT_BACKENDS, agent_backend
from sead_ray.core.config import ConfigError
from sead_ray.core.models import ModelError


def test_each_reference_is_played_by_the_backend_its_prefix_names():
    assert agent_backend("script:honest") is AGENT_BACKENDS.get("script")
    assert agent_backend("openai:gpt-4o@https://api.example.com/v1") is AGENT_BACKENDS.get("openai")
    for model in ("embedded:smollm2-135m-instruct", "runs/demo", "org/model"):
        assert agent_backend(model) is AGENT_BACKENDS.get("model") and agent_backend(model).on_engine
    assert not agent_backend("script:honest").on_engine and not agent_backend("openai:m@http://h/v1").on_engine


def test_references_are_checked_before_anything_starts(monkeypatch):
    with pytest.raises(ModelError, match="unknown script class 'nope'"):
        agent_backend("script:nope").check(None, "script:nope")
    with pytest.raises(ModelError, match="openai:MODEL@"):
        agent_backend("openai:no-url").check(None, "openai:no-url")


def test_what_an_evaluation_by_each_backend_depends_on(scenario):
    assert agent_backend("script:honest").identity(None, "script:honest") == "script:honest"
    assert agent_backend("openai:m@http://h/v1").identity(None, "openai:m@http://h/v1") is None   # never the same twice
    agent, startup = asyncio.run(agent_backend("script:honest").build(None, scenario, "script:honest"))
    assert startup == {"script": "honest"} and agent.name == "honest"
    with pytest.raises(ConfigError, match="names no registered agent backend"):
        AGENT_BACKENDS.get("grpc")
