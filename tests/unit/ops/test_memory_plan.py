"""`sead-ray plan`: model shapes give the right parameter counts; the plan has every line the GPU holds, knows
the device's memory, refuses (exit 2, naming the role and the shortfall) what does not fit it, and the shipped
paper config fits an 80 GB A100 per trainer rank and per engine by its own plan; `kv_cache_mb: auto` is capped
by the device on a GPU."""
import subprocess
import sys
import types

import pytest

from sead_ray.core.config import load_config
from sead_ray.ops.memory_plan import (
    LOGIT_BYTES,
    auto_kv_cache_mb,
    checkpoint_bytes,
    device_memory_bytes,
    engine_memory_utilization,
    engine_plan,
    engine_runtime_bytes,
    fit_problems,
    format_plan,
    plan_roles,
    trainer_plan,
    usable_bytes,
    weight_receive_bytes,
)
from sead_ray.ops.model_shape import GIB, KNOWN_SHAPES, ModelShape
from tests.conftest import ROOT


def test_parameter_counts_match_the_published_sizes(tmp_path):
    assert KNOWN_SHAPES["Qwen2.5-14B-Instruct"].params / 1e9 == pytest.approx(14.77, rel=0.01)
    assert KNOWN_SHAPES["Qwen2.5-72B-Instruct"].params / 1e9 == pytest.approx(72.7, rel=0.01)
    assert KNOWN_SHAPES["Qwen2.5-0.5B-Instruct"].params / 1e9 == pytest.approx(0.494, rel=0.01)   # tied
    from sead_ray.core.models import prepare_embedded
    smollm = ModelShape.from_hf_config(prepare_embedded() / "config.json")
    assert smollm.params / 1e6 == pytest.approx(134.5, rel=0.01)     # tied embeddings counted once


PAPER = ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml"
QWEN14 = KNOWN_SHAPES["Qwen2.5-14B-Instruct"]
A100_80, A100_40 = 79.2 * GIB, 39.4 * GIB


def _plan(*overrides: str):
    proc = subprocess.run([sys.executable, "-m", "sead_ray.cli.main", "plan", "--config", str(PAPER),
                           *[a for o in overrides for a in ("--set", o)]],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def test_the_paper_config_fits_an_a100_80gb_by_its_own_plan_with_every_line():
    cfg = load_config(PAPER)
    assert cfg.placement.gpu_memory_gib == pytest.approx(79.2) and device_memory_bytes(cfg) == pytest.approx(A100_80)
    roles = plan_roles(cfg, QWEN14, QWEN14, A100_80)
    assert [r.role for r in roles] == ["trainer", "agent engine", "user-simulator engine"]
    assert fit_problems(roles, cfg, QWEN14, A100_80) == []
    assert all(r.total <= usable_bytes(A100_80) for r in roles)
    trainer = roles[0].items
    for line in ("parameters (ZeRO-3 shard)", "optimizer-step temporaries (one sub-group)", "DeepSpeed reduce bucket",
                 "gathered parameters in flight (max live + a layer)",
                 "embeddings + lm_head gathered, full-size gradient",
                 "activations (1 micro-batch; 1,024-token prefix once)",
                 "CUDA context + 2 NCCL communicator(s)"):       # rank 0: its group and the weight sync's
        assert trainer[line] > 0, line
    # the logits of the trained agent tokens only: at most 15 turns x 256 tokens of one call, not the 8k window
    assert trainer["logits of trained positions (3,840)"] == 3840 * QWEN14.vocab * LOGIT_BYTES
    # the untied embeddings and lm_head gathered whole, plus the lm_head's full-size gradient
    assert trainer["embeddings + lm_head gathered, full-size gradient"] == 3 * QWEN14.vocab * QWEN14.hidden * 2
    # fitting takes the optimizer's offload: its lines are there, in CPU memory
    assert trainer["optimizer: Adam m, v, fp32 master; in CPU memory"] == 0
    assert trainer["gradients (shard; in CPU memory)"] == 0
    # the other ranks hold one communicator less than rank 0
    assert "CUDA context + 1 NCCL communicator(s)" in trainer_plan(cfg, QWEN14, rank0=False)
    rc, out, err = _plan()
    assert rc == 0, err
    assert "every role fits" in out and "79.2 GiB, 75.2 usable (5% margin)" in out
    # what one checkpoint writes: the HF weights in bf16, DeepSpeed's partitioned bf16 weights and its fp32
    # master copy, Adam's m and v (16 bytes a parameter in all: ~220 GiB for 14.8 B), every 5 iterations
    hf, state = checkpoint_bytes(cfg, QWEN14)
    assert (hf, state) == (2 * QWEN14.params, 14 * QWEN14.params)
    assert f"checkpoint (every 5 iteration(s)): {(hf + state) / 2**30:.1f} GiB" in out and "stop_save_max_s" in out


def test_entropy_softmax_is_counted_only_when_trained():
    cfg = load_config(PAPER)
    assert cfg.train.entropy_coef == 0
    items = trainer_plan(cfg, QWEN14)
    chunk = items["entropy, reported (256-position chunks)"]
    assert chunk == 2 * 256 * QWEN14.vocab * 4 and not any(k.startswith("entropy softmax") for k in items)
    trained = trainer_plan(load_config(PAPER, ["train.entropy_coef=0.01"]), QWEN14)
    assert trained["entropy softmax (entropy_coef > 0)"] == 2 * 3840 * QWEN14.vocab * 4 > 10 * chunk


def test_the_shared_prefix_is_held_once_per_micro_batch_in_the_plan():
    """trainer.shared_prefix changes the activations line: the shared prefix's activations once, not once per row,
    and its keys and values over the rows as a line of their own."""
    def plan(mode: str, mbs: int) -> dict:
        return trainer_plan(load_config(PAPER, [f"trainer.shared_prefix={mode}", f"train.micro_batch_size={mbs}"]),
                            QWEN14)

    def activations(p: dict) -> float:
        return next(v for k, v in p.items() if k.startswith("activations"))
    off, on = plan("off", 4), plan("auto", 4)
    assert not any("shared prefix" in k for k in off)
    assert any("1,024-token prefix once" in k for k in on) and on["shared prefix: keys and values over the rows"] > 0
    # activations grow with the tokens held: 1,024 + 4 x (seq - 1,024) of the 4 x seq the per-call path holds
    seq = load_config(PAPER).train.max_seq_len
    assert activations(on) == pytest.approx(activations(off) * (1024 + 4 * (seq - 1024)) / (4 * seq), rel=1e-6)
    assert activations(plan("auto", 1)) == activations(plan("off", 1))   # one row: the prefix is held once either way


def test_the_plan_refuses_what_does_not_fit_naming_the_role_and_the_shortfall():
    # without the optimizer's offload rank 0 needs more than an 80 GB A100 holds
    rc, out, err = _plan("trainer.offload_optimizer=false")
    assert rc == 2 and "Traceback" not in err
    # (the shared prefix's keys and values over the rows and their fp32 gradient sum are in it: 0.75 GiB at 1 row)
    assert "trainer does not fit: it needs 78.3 GiB per GPU, 3.1 GiB more than the 75.2 GiB usable" in err
    assert "does NOT fit" in out and "optimizer: Adam m, v, fp32 master " in out
    # p4d's 40 GB A100s: the former fixed 16 GiB KV cache beside 27.5 GiB of weights fits neither engine
    rc, _, err = _plan("placement.gpu_memory_gib=39.4", "engine.kv_cache_mb=16384")
    assert rc == 2 and "agent engine does not fit" in err and "user-simulator engine does not fit" in err
    assert "trainer" not in err
    rc, _, err = _plan("placement.gpu_memory_gib=39.4", "trainer.offload_optimizer=false")
    assert rc == 2 and "trainer does not fit: it needs 78.3 GiB per GPU, 40.9 GiB more" in err
    # micro-batches of 4 whole calls: 4 rows x 8k positions of logits over a 152k vocabulary
    bigger = load_config(PAPER, ["train.micro_batch_size=4"])
    assert fit_problems(plan_roles(bigger, QWEN14, QWEN14, A100_80), bigger, QWEN14, A100_80)[0].startswith(
        "trainer does not fit")
    # an engine whose KV cache holds fewer than 4 calls of max_model_len is refused too (below one vLLM would
    # not even start): the paper config on p4d's 40 GB A100s, whose KV auto leaves ~6 GiB, 2 calls of 16k tokens
    small = load_config(PAPER, ["engine.kv_cache_mb=1024"])
    assert any("holds 0 call(s) of engine.max_model_len = 16,384 tokens" in p
               for p in fit_problems(plan_roles(small, QWEN14, QWEN14, A100_80), small, QWEN14, A100_80))
    rc, out, err = _plan("placement.gpu_memory_gib=39.4")
    assert rc == 2 and "does NOT fit" in out and "Traceback" not in err
    assert "agent engine: its KV cache (3.1 GiB) holds 1 call(s)" in err and "fewer than 4" in err   # less a sync
    assert "user-simulator engine: its KV cache (6.6 GiB) holds 2 call(s)" in err


def test_without_a_known_device_the_plan_says_so_and_refuses_nothing(monkeypatch):
    import torch
    cfg = load_config(PAPER, ["placement.gpu_memory_gib=0", "trainer.offload_optimizer=false"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_memory_bytes(cfg) is None
    assert "set placement.gpu_memory_gib to check the fit" in format_plan(cfg, QWEN14, QWEN14, None)
    assert fit_problems(plan_roles(cfg, QWEN14, QWEN14), cfg, QWEN14, None) == []
    # on a GPU machine the device answers
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(total_memory=123 * GIB))
    assert device_memory_bytes(cfg) == 123 * GIB


def test_smoke_config_is_two_gpus_and_fits():
    cfg = load_config(ROOT / "configs" / "smoke_qwen2.5_0.5b_2gpu.yaml")
    gpus = cfg.trainer.num_workers * cfg.placement.trainer.gpus + cfg.agent.engines * cfg.placement.agent.gpus
    assert gpus == 2 and cfg.user.backend == "rule" and cfg.placement.user.gpus == 0
    assert cfg.weight_sync.transport == "nccl" and cfg.trainer.backend == "nccl"
    # two iterations under the planted preference: the first step must change the weights (issue 37)
    assert cfg.train.iterations == 2 and cfg.train.reward == "planted_brevity" and cfg.weight_sync.verify == "every"
    shape = KNOWN_SHAPES["Qwen2.5-0.5B-Instruct"]
    assert fit_problems(plan_roles(cfg, shape, None, A100_80), cfg, shape, A100_80) == []


def test_four_gpu_smoke_adds_zero3_ranks_offload_and_a_gpu_simulator_and_fits():
    cfg = load_config(ROOT / "configs" / "smoke_qwen2.5_0.5b_4gpu.yaml")
    gpus = (cfg.trainer.num_workers * cfg.placement.trainer.gpus + cfg.agent.engines * cfg.placement.agent.gpus
            + cfg.user.engines * cfg.placement.user.gpus)
    assert gpus == 4 and (cfg.trainer.num_workers, cfg.trainer.zero_stage, cfg.trainer.offload_optimizer) == (2, 3, True)
    assert cfg.user.backend == "vllm" and cfg.placement.user.gpus == 1
    assert (cfg.train.iterations, cfg.train.reward, cfg.weight_sync.transport) == (2, "planted_brevity", "nccl")
    shape = KNOWN_SHAPES["Qwen2.5-0.5B-Instruct"]
    assert fit_problems(plan_roles(cfg, shape, shape, A100_80), cfg, shape, A100_80) == []


def test_deepspeed_buffers_are_bounded_and_the_plan_counts_the_same_numbers():
    from sead_ray.training.trainer_protocol import (
        MAX_LIVE_PARAMETERS,
        REDUCE_BUCKET_ELEMENTS,
        SUB_GROUP_ELEMENTS,
        TrainerSettings,
        deepspeed_config,
    )
    cfg = load_config(PAPER)
    ds = deepspeed_config(TrainerSettings.from_config(cfg, "/models/x"), 4)
    zero = ds["zero_optimization"]
    assert zero["reduce_bucket_size"] == REDUCE_BUCKET_ELEMENTS < 5e8        # DeepSpeed's default: 5e8
    assert zero["stage3_max_live_parameters"] == MAX_LIVE_PARAMETERS < 1e9   # 1e9
    assert zero["sub_group_size"] == SUB_GROUP_ELEMENTS < 1e9                # 1e9
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True} and not ds["zero_force_ds_cpu_optimizer"]
    items = trainer_plan(cfg, QWEN14)
    assert items["DeepSpeed reduce bucket"] == 2 * REDUCE_BUCKET_ELEMENTS * 2
    assert items["gathered parameters in flight (max live + a layer)"] == (MAX_LIVE_PARAMETERS + QWEN14.layer_params) * 2
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig  # DeepSpeed's own schema takes every key
    parsed = DeepSpeedZeroConfig(**zero)
    assert (parsed.reduce_bucket_size, parsed.max_live_parameters, parsed.sub_group_size, parsed.offload_optimizer.device) \
        == (REDUCE_BUCKET_ELEMENTS, MAX_LIVE_PARAMETERS, SUB_GROUP_ELEMENTS, "cpu")
    plain = deepspeed_config(TrainerSettings.from_config(load_config(ROOT / "configs" / "embedded.yaml"), "x"), 1)
    assert "offload_optimizer" not in plain["zero_optimization"]


def test_plan_command_prints_every_role():
    rc, out, err = _plan()
    assert rc == 0, err
    for part in ("trainer rank 0: 4 ZeRO-3 ranks", "agent engine", "user-simulator engine", "logits of trained positions",
                 "optimizer offloaded to CPU", "CPU memory per rank for the offloaded optimizer"):
        assert part in out


def test_auto_kv_cache_on_a_gpu_is_capped_by_the_device():
    cfg = load_config(PAPER)
    assert cfg.engine.kv_cache_mb == "auto"
    uncapped, why = auto_kv_cache_mb(cfg, QWEN14, 1, prompt_tokens=1024)
    assert uncapped / 1024 > 400 and why == "256 calls x 9,184 tokens"           # 430 GiB: no device could
    mb, why = auto_kv_cache_mb(cfg, QWEN14, 1, prompt_tokens=1024, device_bytes=A100_80, takes_weights=True)
    assert "capped by the GPU: 79.2 GiB less 5%" in why and "a weight sync" in why
    weights = QWEN14.params * 2
    filled = (weights + mb * 2**20 + engine_runtime_bytes(cfg, QWEN14, 1, takes_weights=True)
              + weight_receive_bytes(cfg, QWEN14))
    assert usable_bytes(A100_80) - 2**20 <= filled <= usable_bytes(A100_80)      # the rest of the device, no more
    assert 40 < mb / 1024 < 42                                                   # ~41 GiB, ~223k tokens
    # tensor parallel 2: half the weights per GPU, so more room for (per-GPU) KV
    mb_tp2, _ = auto_kv_cache_mb(cfg, QWEN14, 2, prompt_tokens=1024, device_bytes=A100_80)
    assert mb_tp2 > mb
    # a small model's calls need less than the device leaves: not capped
    small = load_config(ROOT / "configs" / "smoke_qwen2.5_0.5b_2gpu.yaml")
    _, why = auto_kv_cache_mb(small, KNOWN_SHAPES["Qwen2.5-0.5B-Instruct"], 1, 1024, device_bytes=A100_80)
    assert "capped" not in why


def test_auto_kv_cache_holds_the_longest_calls_and_leaves_the_rest_of_the_memory():
    from sead_ray.core.config import ConfigError
    from sead_ray.ops.memory_plan import auto_kv_cache_mb, kv_bytes_per_token, kv_tokens
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


def test_an_engine_on_a_gpu_sizes_auto_kv_from_the_device(tmp_path):
    """The engine actor's `auto` (actors/engine_sizing.py): on a GPU the device caps it (430 GiB asked before)."""
    import json

    from actors.engine_sizing import engine_kv_cache_mb
    q = QWEN14
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": q.layers, "hidden_size": q.hidden, "intermediate_size": q.intermediate,
        "num_attention_heads": q.heads, "num_key_value_heads": q.kv_heads, "vocab_size": q.vocab}))
    cfg = load_config(PAPER)
    agent = engine_kv_cache_mb(cfg, "agent", str(tmp_path), 1, on_gpu=True)
    user = engine_kv_cache_mb(cfg, "user", str(tmp_path), 1, on_gpu=True)
    assert 40 * 1024 < agent < user < 46 * 1024       # the agent's engine also holds the weight sync's communicator
    h100 = engine_kv_cache_mb(load_config(PAPER, ["placement.gpu_memory_gib=139.8"]), "user", str(tmp_path), 1,
                              on_gpu=True)
    assert h100 > user + 50 * 1024                    # an H200's 140 GiB leaves ~60 GiB more


def test_an_engine_that_takes_weights_counts_what_a_sync_holds():
    """Issue 37: the 14B embeddings and lm_head (152064 x 5120 bf16, 1.45 GiB each) are far above a 64 MB bucket and
    cross as one chunk, held twice while vLLM's layerwise reload lands them: ~3 GiB on the agent's engine, which
    its KV cache gives up on an 80 GB A100 (the plan still fits); a frozen simulator's engine holds none of it."""
    cfg = load_config(PAPER)
    embedding = QWEN14.vocab * QWEN14.hidden * 2
    assert weight_receive_bytes(cfg, QWEN14) == 2 * embedding + 2 * 64 * 2**20
    assert 2.9 * GIB < weight_receive_bytes(cfg, QWEN14) < 3.1 * GIB
    line = "weight sync: 2 x largest tensor + 2 buckets"
    agent, user = plan_roles(cfg, QWEN14, QWEN14, A100_80)[1:]
    assert agent.items[line] == weight_receive_bytes(cfg, QWEN14) and line not in user.items
    # what the sync takes, the agent's KV cache gives up (and the weight sync's NCCL communicator)
    kv = next(k for k in agent.items if k.startswith("KV cache"))
    given_up = user.items[kv] - agent.items[kv]
    assert abs(given_up - weight_receive_bytes(cfg, QWEN14) - 0.5 * GIB) < 2 * 2**20
    assert agent.total <= usable_bytes(A100_80) and fit_problems([agent, user], cfg, QWEN14, A100_80) == []
    # a configured KV cache is not shrunk: the sync's buffers come on top of it
    fixed = load_config(PAPER, ["engine.kv_cache_mb=44000"])
    assert engine_plan(fixed, QWEN14, 1, A100_80, takes_weights=True)[line] > 0
    assert fit_problems(plan_roles(fixed, QWEN14, QWEN14, A100_80), fixed, QWEN14, A100_80)[0].startswith(
        "agent engine does not fit")
    # a trained simulator's engines take weights too (by shm or object_store: no NCCL communicator)
    urm = load_config(PAPER, ["user.train=true", "weight_sync.transport=shm"])
    trained_user = plan_roles(urm, QWEN14, QWEN14, A100_80)[2]
    assert trained_user.items[line] == weight_receive_bytes(urm, QWEN14)
    assert engine_runtime_bytes(urm, QWEN14, 1, takes_weights=True) == engine_runtime_bytes(urm, QWEN14, 1)
    # on CPU nothing is planned against a device
    assert line not in engine_plan(cfg, QWEN14, 1, None, on_gpu=False, takes_weights=True)
    rc, out, err = _plan()
    assert rc == 0, err
    assert f"  {line:<56}{weight_receive_bytes(cfg, QWEN14) / GIB:>9.1f}" in out and "every role fits" in out


def test_engines_get_the_plans_gpu_memory_utilization(tmp_path):
    """vLLM starts an engine only once `gpu_memory_utilization` x its GPU is free: the plan's share, so a replacement
    engine waits for its predecessor's memory rather than start into an OOM (vLLM's default 0.92 asks less than the
    14B engine fills, and far more than the 0.5B smoke engine needs)."""
    import json

    from actors.engine_sizing import engine_spec_from_config
    from actors.vllm_engine import engine_kwargs
    q = QWEN14
    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": q.layers, "hidden_size": q.hidden, "intermediate_size": q.intermediate,
        "num_attention_heads": q.heads, "num_key_value_heads": q.kv_heads, "vocab_size": q.vocab}))
    cfg = load_config(PAPER)
    spec = engine_spec_from_config(cfg, "agent", str(tmp_path), 0)
    total = sum(engine_plan(cfg, q, 1, A100_80, takes_weights=True).values())
    assert spec.gpu_memory_utilization == pytest.approx(total / A100_80, abs=0.002)
    assert 0.94 < spec.gpu_memory_utilization <= 0.951                  # auto: the usable 95%, no more
    assert engine_kwargs(spec)["gpu_memory_utilization"] == spec.gpu_memory_utilization
    # the utilization follows the KV cache the engine really gets, the sync's buffers included
    assert engine_memory_utilization(cfg, q, 1, A100_80, 1024, takes_weights=True) > \
        engine_memory_utilization(cfg, q, 1, A100_80, 1024) + weight_receive_bytes(cfg, q) / A100_80 - 0.001
    small = KNOWN_SHAPES["Qwen2.5-0.5B-Instruct"]
    smoke = load_config(ROOT / "configs" / "smoke_qwen2.5_0.5b_2gpu.yaml")
    assert 0.03 < engine_memory_utilization(smoke, small, 1, A100_80, 512, takes_weights=True) < 0.1
    # on CPU, or where the GPU's memory is unknown, vLLM's default stays
    cpu = engine_spec_from_config(load_config(ROOT / "configs" / "embedded.yaml"), "agent", str(tmp_path), 0)
    assert cpu.gpu_memory_utilization == 0 and "gpu_memory_utilization" not in engine_kwargs(cpu)
