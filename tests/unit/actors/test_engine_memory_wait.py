"""A GPU engine waits for the share of its GPU it plans to fill (a replacement in a dead engine's bundle, whose
memory is still being released), within engine.memory_wait_s, then starts anyway."""
import asyncio

from actors.engine_sizing import engine_spec_from_config
from actors.vllm_engine import wait_for_free_memory
from tests.conftest import tiny_config

GIB = 2**30


def memory_freed_after(polls: int, total: int = 80 * GIB):
    """Test double of cuda_free_and_total: one GPU whose predecessor's 70 GiB are released after `polls` polls."""
    seen = []

    def free_and_total():
        seen.append(1)
        return [(total - 70 * GIB if len(seen) <= polls else total - 1 * GIB, total)]
    return free_and_total, seen


def test_it_waits_until_the_memory_is_free():
    probe, seen = memory_freed_after(3)
    waited = asyncio.run(wait_for_free_memory(0.8, 60, probe, poll_s=0.01))
    assert len(seen) == 4 and 0.02 < waited < 5


def test_free_memory_starts_at_once():
    probe, seen = memory_freed_after(0)
    assert asyncio.run(wait_for_free_memory(0.8, 60, probe, poll_s=0.01)) < 0.01 and len(seen) == 1


def test_it_gives_up_after_the_wait_and_lets_the_engine_say_why(caplog):
    probe, seen = memory_freed_after(10**6)
    waited = asyncio.run(wait_for_free_memory(0.8, 0.05, probe, poll_s=0.01))
    assert 0.05 <= waited < 2 and len(seen) > 2
    assert "10.0 of the 64.0 GiB" in caplog.text


def test_the_wait_is_the_configs():
    spec = engine_spec_from_config(tiny_config("engine.memory_wait_s=42"), "agent", "/m", 0)
    assert spec.memory_wait_s == 42 and spec.gpu_memory_utilization == 0   # on CPU: no GPU share, no wait
