"""GPU check (run on a CUDA machine with the `gpu` extra; never part of CI).

    python benchmarks/gpu_check.py --out gpu_check.json

1. Builds a randomly initialised Llama of a real size (no download; throughput does not depend on the
   weights' values) and starts our VLLMEngine on CUDA.
2. Measures generation throughput with concurrent requests.
3. Weight sync over NCCL (the `nccl` transport): a trainer-side process group of rank 0 broadcasts a
   perturbed state to the engine's worker, which reloads it; checks that greedy output changed and
   that restoring the original weights restores the output token for token.
Prints the figures and writes them as JSON.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main(args) -> dict:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from actors.vllm_engine import EngineSpec, VLLMEngine
    from actors.weight_sync import NcclTransport

    assert torch.cuda.is_available(), "this check needs a CUDA device"
    out: dict = {"device": torch.cuda.get_device_name(0)}
    tmp = Path(tempfile.mkdtemp(prefix="sead-gpu-"))
    config = LlamaConfig(vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.hidden * 4 // 1,
                         num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64,
                         num_key_value_heads=args.hidden // 64, max_position_embeddings=4096, torch_dtype="bfloat16")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(tmp)
    tok_src = args.tokenizer
    if tok_src:
        AutoTokenizer.from_pretrained(tok_src).save_pretrained(tmp)
    out["params_m"] = sum(p.numel() for p in model.parameters()) / 1e6

    engine = VLLMEngine(EngineSpec(str(tmp), dtype="bfloat16", kv_cache_mb=8192, max_model_len=2048,
                                   max_num_seqs=256, chunked_prefill=True, enforce_eager=False))
    out["engine_start_s"] = await engine.start()
    prompt = list(range(100, 612))
    t0 = time.perf_counter()
    gens = await asyncio.gather(*[engine.generate(prompt + [i], temperature=1.0, top_p=1.0, max_tokens=128, seed=i)
                                  for i in range(args.concurrency)])
    dt = time.perf_counter() - t0
    out["throughput_tokens_per_s"] = sum(len(g.token_ids) for g in gens) / dt

    # NCCL weight sync: engine worker is rank 1, this process rank 0.
    port = free_port()
    recv_group = asyncio.ensure_future(engine.engine.collective_rpc("sead_init_nccl", args=("127.0.0.1", port, 2, 1)))
    sender = NcclTransport("127.0.0.1", port, world_size=2)
    await recv_group
    base = (await engine.generate(prompt, temperature=0.0, top_p=1.0, max_tokens=16)).token_ids
    original = {k: v.detach().clone() for k, v in model.state_dict().items()}
    perturbed = {k: (v + 0.05 * torch.randn_like(v.float()).to(v.dtype)) if v.dim() == 2 else v for k, v in original.items()}

    async def sync(state: dict) -> float:
        meta = [(k, str(v.dtype).replace("torch.", ""), tuple(v.shape)) for k, v in state.items()]
        t0 = time.perf_counter()
        receiving = asyncio.ensure_future(engine.engine.collective_rpc("sead_receive_nccl", args=(meta,)))
        await asyncio.sleep(0.1)
        for _ in sender.send(iter(state.items()), 1):
            pass
        await receiving
        await engine.reset_prefix_cache()
        return time.perf_counter() - t0

    out["nccl_sync_s"] = await sync(perturbed)
    changed = (await engine.generate(prompt, temperature=0.0, top_p=1.0, max_tokens=16)).token_ids
    await sync(original)
    restored = (await engine.generate(prompt, temperature=0.0, top_p=1.0, max_tokens=16)).token_ids
    out["nccl_output_changed"] = changed != base
    out["nccl_output_restored"] = restored == base
    out["nccl_mb"] = sum(v.numel() * v.element_size() for v in original.values()) / 2**20
    out["nccl_mb_per_s"] = out["nccl_mb"] / out["nccl_sync_s"]
    engine.shutdown()
    print(json.dumps(out, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--tokenizer", default="", help="optional local tokenizer folder to copy")
    p.add_argument("--out", default="")
    asyncio.run(main(p.parse_args()))
