"""GPU check for one CUDA device (an H200 in under 10 minutes); never part of CI, nothing downloaded.

    python benchmarks/gpu_check.py --tokenizer TOKENIZER_DIR --out gpu_check.json

1. A randomly initialised model of the Qwen2.5 architecture (default: Qwen2.5-1.5B's shape; throughput
   does not depend on the weights' values), saved with the given tokenizer (e.g. the embedded
   SmolLM2 folder: `sead-ray models list`), served by our VLLMEngine on CUDA with CUDA graphs and
   chunked prefill (the settings `engine_spec_from_config` picks for a role with GPUs).
2. Generation throughput with concurrent requests.
3. Colocated weight transfer over vLLM's `ipc` backend, the path of `placement.colocate`: a DeepSpeed
   ZeRO-3 trainer (world 1) on the same GPU, our `GatheredWeights` source and `EnginePoolClient`-shaped
   client; the engine must then serve the trainer's weights (logprob agreement) and greedy output must
   change with the weights.
4. Sleep mode: memory released by `sleep` and regained by `wake_up`.
Prints the figures as JSON (and writes them with --out).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class LocalEngineClient:
    """vLLM's weight-sync client protocol over an in-process VLLMEngine, for the trainer side running
    in a worker thread (the engine's calls run on the event loop)."""

    def __init__(self, engine, loop, version: int = 1):
        self.engine, self.loop, self.version = engine, loop, version

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self._run(self.engine.init_weight_transfer(init_info))

    def start_weight_update(self) -> None:
        self._run(self.engine.start_weight_update())

    def update_weights(self, update_info) -> None:
        self._run(self.engine.update_weights(update_info))

    def finish_weight_update(self, weight_version=None) -> None:
        self._run(self.engine.finish_weight_update())


def build_model(tmp: Path, args):
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    return model


def zero3_trainer(model):
    """The model under DeepSpeed ZeRO-3 on this GPU (world 1), as the trainer's ranks hold it."""
    import deepspeed
    import torch
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29531"), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    deepspeed.init_distributed(dist_backend="nccl")
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}, "bf16": {"enabled": True},
              "zero_allow_untested_optimizer": True}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    engine, *_ = deepspeed.initialize(model=model.cuda(), optimizer=optimizer, config=config)
    return engine


def trainer_logprobs(module, ids: list[int]) -> list[float]:
    import deepspeed
    import torch
    with torch.no_grad(), deepspeed.zero.GatheredParameters(list(module.parameters())):
        logits = module(torch.tensor([ids], device="cuda")).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:], device="cuda")[:, None])[:, 0].tolist()


async def main(args) -> dict:
    import torch

    from actors.vllm_engine import EngineSpec, VLLMEngine
    from actors.weight_sync import GatheredWeights

    assert torch.cuda.is_available(), "this check needs a CUDA device"
    out: dict = {"device": torch.cuda.get_device_name(0)}
    tmp = Path(tempfile.mkdtemp(prefix="sead-gpu-"))
    model = build_model(tmp, args)
    out["params_m"] = sum(p.numel() for p in model.parameters()) / 1e6

    engine = VLLMEngine(EngineSpec(str(tmp), dtype="bfloat16", kv_cache_mb=args.kv_cache_mb, max_model_len=4096,
                                   max_num_seqs=256, enforce_eager=False, chunked_prefill=True,
                                   weight_transfer_backend="ipc", sleep_mode=True))
    out["engine_start_s"] = await engine.start()
    prompt = list(range(100, 612))
    t0 = time.perf_counter()
    gens = await asyncio.gather(*[engine.generate(prompt + [i], temperature=1.0, top_p=1.0, max_tokens=128, seed=i)
                                  for i in range(args.concurrency)])
    dt = time.perf_counter() - t0
    out["throughput_tokens_per_s"] = sum(len(g.token_ids) for g in gens) / dt

    # Sleep mode: what the colocated loop does around each GRPO step.
    free_awake = torch.cuda.mem_get_info()[0]
    t0 = time.perf_counter()
    await engine.sleep()
    out["sleep_s"], free_asleep = time.perf_counter() - t0, torch.cuda.mem_get_info()[0]
    t0 = time.perf_counter()
    await engine.wake_up()
    out["wake_s"] = time.perf_counter() - t0
    out["sleep_released_gb"] = (free_asleep - free_awake) / 2**30
    out["wake_regained_gb"] = (free_asleep - torch.cuda.mem_get_info()[0]) / 2**30

    # Colocated transfer of new weights over vLLM's ipc backend, from a ZeRO-3 trainer on this GPU.
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
    from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo
    base = (await engine.generate(prompt, temperature=0.0, top_p=1.0, max_tokens=16)).token_ids
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.add_(0.05 * torch.randn_like(p))
    trainer = zero3_trainer(model)
    loop = asyncio.get_running_loop()

    def send() -> float:
        source = GatheredWeights(trainer.module, zero_stage=3, rank=0)
        sender = WeightTransferTrainerFactory.trainer_init(IPCTrainerInitInfo(rank=0),
                                                            client=LocalEngineClient(engine, loop), source=source)
        t = time.perf_counter()
        sender.send_weights()
        return time.perf_counter() - t
    out["ipc_sync_s"] = await asyncio.to_thread(send)
    out["ipc_mb"] = sum(p.ds_numel * 2 for p in trainer.module.parameters()) / 2**20
    out["ipc_mb_per_s"] = out["ipc_mb"] / out["ipc_sync_s"]
    after = await engine.generate(prompt, temperature=0.0, top_p=1.0, max_tokens=16)
    out["ipc_output_changed"] = after.token_ids != base
    recomputed = trainer_logprobs(trainer.module, prompt + after.token_ids)[len(prompt) - 1:]
    out["logprob_max_abs_diff"] = max(abs(a - b) for a, b in zip(after.logprobs, recomputed))
    out["ok"] = out["ipc_output_changed"] and out["logprob_max_abs_diff"] < 0.1 and out["sleep_released_gb"] > 0
    engine.shutdown()
    print(json.dumps(out, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokenizer", required=True, help="a local tokenizer folder (e.g. the embedded SmolLM2 model)")
    p.add_argument("--hidden", type=int, default=1536)
    p.add_argument("--intermediate", type=int, default=8960)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-cache-mb", type=int, default=16384)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--out", default="")
    asyncio.run(main(p.parse_args()))
