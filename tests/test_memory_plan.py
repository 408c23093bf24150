"""`sead-ray plan`: model shapes give the right parameter counts, and the shipped paper config fits an
80 GB A100 per trainer rank and per engine by its own plan."""
import subprocess
import sys

import pytest

from sead_ray.config import load_config
from sead_ray.memory_plan import GIB, KNOWN_SHAPES, ModelShape, engine_plan, trainer_plan
from tests.conftest import ROOT


def test_parameter_counts_match_the_published_sizes(tmp_path):
    assert KNOWN_SHAPES["Qwen2.5-14B-Instruct"].params / 1e9 == pytest.approx(14.77, rel=0.01)
    assert KNOWN_SHAPES["Qwen2.5-72B-Instruct"].params / 1e9 == pytest.approx(72.7, rel=0.01)
    from sead_ray.models import prepare_embedded
    smollm = ModelShape.from_hf_config(prepare_embedded() / "config.json")
    assert smollm.params / 1e6 == pytest.approx(134.5, rel=0.01)     # tied embeddings counted once


def test_the_paper_config_fits_an_a100_80gb():
    cfg = load_config(ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml")
    qwen = KNOWN_SHAPES["Qwen2.5-14B-Instruct"]
    trainer = sum(trainer_plan(cfg, qwen).values()) / GIB
    engine = sum(engine_plan(cfg, qwen, cfg.agent.tensor_parallel_size).values()) / GIB
    assert trainer < 78 and engine < 78, (trainer, engine)
    # micro-batches of 4 whole calls would not: the logits alone of 4 x 8k tokens x 152k vocabulary
    bigger = load_config(ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml", ["train.micro_batch_size=4"])
    assert sum(trainer_plan(bigger, qwen).values()) / GIB > 80


def test_plan_command_prints_every_role():
    proc = subprocess.run([sys.executable, "-m", "sead_ray.cli", "plan", "--config",
                           str(ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for part in ("trainer: 4 ZeRO-3 ranks", "agent engine", "user-simulator engine", "logits of trained positions"):
        assert part in proc.stdout


def test_auto_kv_cache_holds_the_longest_calls_and_leaves_the_rest_of_the_memory():
    from sead_ray.config import ConfigError
    from sead_ray.memory_plan import auto_kv_cache_mb, kv_bytes_per_token, kv_tokens
    cfg = load_config(ROOT / "configs" / "embedded.yaml",
                      ["engine.kv_cache_mb=auto", "dialogue.max_turns=4", "engine.max_num_seqs=32",
                       "dialogue.agent_train.max_tokens=48", "dialogue.agent_eval.max_tokens=48",
                       "dialogue.user.max_tokens=96"])
    smollm = ModelShape("SmolLM2-135M", 30, 576, 1536, 9, 3, 49152, True)
    assert kv_bytes_per_token(cfg, smollm, 1) == 2 * 30 * 3 * 64 * 4            # K and V, fp32
    per_call = 800 + 4 * (48 + 96 + 32)                                          # prompt + 4 exchanges
    mb, why = auto_kv_cache_mb(cfg, smollm, 1, prompt_tokens=800)
    assert mb == int(32 * per_call * 46080 / 2**20) and why == f"32 calls x {per_call:,} tokens"
    # a call never exceeds the context window
    long = load_config(ROOT / "configs" / "embedded.yaml", ["engine.kv_cache_mb=auto", "engine.max_model_len=1024"])
    assert auto_kv_cache_mb(long, smollm, 1, prompt_tokens=800)[1].endswith("x 1,024 tokens")
    # on CPU at most a quarter of the free memory, shared by the engines
    capped, why = auto_kv_cache_mb(cfg, smollm, 1, prompt_tokens=800, available_bytes=4 * GIB, engines=2)
    assert capped == 512 and "capped at 25% of the 4.0 GiB available, over 2 engine(s)" in why
    assert kv_tokens(load_config(ROOT / "configs" / "embedded.yaml", ["engine.kv_cache_mb=512"]), smollm, 1) == 11650
    with pytest.raises(ConfigError, match="kv_cache_mb"):
        load_config(ROOT / "configs" / "embedded.yaml", ["engine.kv_cache_mb=big"])
