"""Shared fixtures. Real parts, small sizes: the default scenario, the real SmolLM2 tokenizer, one local
Ray cluster, one finished training run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED_CONFIG = ROOT / "configs" / "embedded.yaml"
SCENARIO = ROOT / "configs" / "scenarios" / "restaurant_promotion.yaml"


@pytest.fixture(scope="session")
def scenario():
    from sead_ray.scenario.scenario import load_scenario
    return load_scenario(SCENARIO)


@pytest.fixture(scope="session")
def schema(scenario):
    return scenario.schema


@pytest.fixture(scope="session")
def smollm_tokenizer():
    from transformers import AutoTokenizer

    from sead_ray.core.models import prepare_embedded
    return AutoTokenizer.from_pretrained(prepare_embedded())


# The tests' own setting, not the demo's: the whole grid, no GRPO groups, no held-out evaluations,
# gradient checkpointing on (the sampling temperature stays the demo's 0.7: tempered logprobs), engines
# not pinned to cores (several share each core here; unpinned, an engine starts one process fewer).
# train.skip_no_signal_steps off: the tiny models' calls often give no reward differences, and the tests
# follow every step's weights to the engines (the skip itself: tests/unit/training/test_loop.py)
TEST_SETTING = ["curriculum.user_set=''", "train.rollouts_per_profile=1", "train.advantage_mode=batch_mean",
                "train.gradient_checkpointing=true", "train.eval_every=0", "engine.cpu_bind=nobind",
                "train.skip_no_signal_steps=false",
                # the demo's weak-start levers (issue 36) off: each test that needs one sets it
                "train.warm_start=none", "curriculum.depth=off", "user.rule.ear=lexicon", "train.eval_user_sets=[]",
                "train.eval_depths=[cold]", "train.drop_no_signal_calls=false", "train.warm_start_decision_weight=1",
                "train.batch_size=4"]


def tiny_config(*overrides: str):
    """The embedded config shrunk for tests: tiny random Llama engines, short calls, small caches."""
    from sead_ray.core.config import load_config
    base = ["models.agent=tiny:llama-h64", "models.user=tiny:llama-h64", "dialogue.max_turns=4",
            "dialogue.agent_train.max_tokens=12", "dialogue.agent_eval.max_tokens=12",
            "dialogue.user.max_tokens=48", "dialogue.user_reply_max_chars=24", "engine.kv_cache_mb=64",
            "engine.max_model_len=2048", "engine.max_num_seqs=16",
            "ray.dashboard=false", "placement.timeout_s=30", "user.backend=vllm", "train.iterations=3",
            "train.lr=1e-6", "train.micro_batch_size=1", *TEST_SETTING]
    return load_config(EMBEDDED_CONFIG, base + list(overrides))


@pytest.fixture(scope="session")
def ray_cluster():
    """One real local Ray cluster per test session (4 logical CPUs on this 2-core machine, so that
    fractional bundles of several roles fit), up only while the tests that use it run (see below)."""
    import ray
    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false"}})
    yield ray
    ray.shutdown()


# An idle Ray cluster takes ~7 % of a core (measured: 4.4 CPU-s a minute), time that the tests starting clusters,
# engines and servers of their own would lose for the rest of the session. So the modules on the session's
# cluster run first, one after another, and it is stopped after the last test that uses it.
def _on_ray_cluster(item) -> bool:
    return "ray_cluster" in getattr(item, "fixturenames", ())


_last_on_ray: list = []   # that last test, once the tests are ordered


def pytest_collection_modifyitems(items):
    modules_on_ray = {item.module for item in items if _on_ray_cluster(item)}
    items.sort(key=lambda item: item.module not in modules_on_ray)   # stable: each module's order is kept
    _last_on_ray[:] = [item for item in items if _on_ray_cluster(item)][-1:]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield   # the module's fixtures (engines, trainers) are finalized first
    if item in _last_on_ray:
        import ray
        ray.shutdown()


# One small real training run made once per session, for the tests that read a finished run
# (tests/system/test_resume.py compares a killed and resumed run with it; tests/system/test_view.py serves it): 4
# iterations of 4 calls, a checkpoint each, held-out evaluations at 0, 2 and 4; the prefill hands every
# turn a state estimate (the reply after it is the tiny model's own), as a trained agent's turns carry.
FINISHED_RUN_PREFILL = '{"estimate": {"cooperation": 3, "emotion": 2, "trust": 1}, "reply": "Hello, '
FINISHED_RUN_SETTINGS = [
    "models.agent=tiny:llama-h64", "user.backend=rule", "train.iterations=4", "train.batch_size=4",
    "train.micro_batch_size=2", "train.checkpoint_every=1", "train.keep_checkpoints=0", "dialogue.max_turns=3",
    "dialogue.agent_train.max_tokens=12", "dialogue.agent_eval.max_tokens=12", "engine.kv_cache_mb=64",
    "engine.max_model_len=2048", "ray.dashboard=false", "train.lr=1e-3", "seed=5", *TEST_SETTING,
    "train.eval_every=2", "train.eval_profiles=3", f"dialogue.agent_prefill='{FINISHED_RUN_PREFILL}'"]


def train_command(*args: str) -> list[str]:
    """`sead-ray train ARGS` with the finished run's settings."""
    return [sys.executable, "-m", "sead_ray.cli.main", "train", *map(str, args),
            *[a for s in FINISHED_RUN_SETTINGS for a in ("--set", s)]]


@dataclass
class FinishedRun:
    path: Path      # made as `--out run` from its parent folder (a relative run directory)
    stdout: str
    prometheus: Optional[str]   # the URL of the Prometheus that scraped it (None: no Prometheus binary here)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory) -> Iterator[Optional[str]]:
    """`sead-ray monitor` (Prometheus alone, scraping every second) for the session, where Prometheus is
    installed (`make test` installs Debian's as root): its URL, else None."""
    from tests.helpers.servers import free_port
    if shutil.which("prometheus") is None:
        yield None
        return
    port = free_port()
    monitor = subprocess.Popen([sys.executable, "-m", "sead_ray.cli.main", "monitor", "--dir",
                                str(tmp_path_factory.mktemp("monitor")), "--port", str(port), "--scrape-interval", "1s",
                                "--no-grafana"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        first = monitor.stdout.readline()
        assert "Prometheus: " + url in first, first
        yield url
    finally:
        monitor.terminate()
        out, _ = monitor.communicate(timeout=60)
    assert monitor.returncode in (0, -15, 130), out


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, prometheus) -> FinishedRun:
    """Also the run tests/system/test_monitoring.py finds in Prometheus: the dashboard on (Ray's metrics export and
    service discovery), and Ray's workers reporting every second (default 10 s) so that a short run is scraped."""
    work = tmp_path_factory.mktemp("finished")
    env = {**os.environ, "RAY_metrics_report_interval_ms": "1000"}
    # its checkpoints staged on "node-local" disk first (train.checkpoint_staging_dir), then copied into the run by a
    # Ray task on the trainer's node; the killed run of test_resume.py writes straight into its run and must match
    proc = subprocess.run([*train_command("--config", EMBEDDED_CONFIG, "--out", "run"), "--set", "ray.dashboard=true",
                           "--set", f"train.checkpoint_staging_dir={work / 'staging'}"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return FinishedRun(work / "run", proc.stdout, prometheus)
