"""Trainer throughput: trained tokens/s of one GRPO step under each CPU trainer layout, side by side on
the same batch and the same initial weights, beside this machine's fp32 matmul peak measured in the
same run.

    python benchmarks/trainer_throughput.py                     # embedded SmolLM2-135M, 4 calls x 1,024 tokens
    python benchmarks/trainer_throughput.py --seq-len 1800 --layouts zero3x2-ckpt,zero1x2 --json t.json

Layouts: ZeRO-3 and ZeRO-1 over 2 workers, and one worker with both cores (ZeRO-0), each with gradient
checkpointing on (-ckpt) and off. Every layout gets fresh workers and first takes a short warm-up step
with a zero advantage (no gradient, so the weights stay the initial ones); the timed step then starts from the
same weights everywhere, so its loss and grad norm must agree across layouts (printed: a layout that
disagrees is wrong, not fast). `--json` writes `default_tokens_per_s` (the layout configs/embedded.yaml
uses) and `speedup_over_zero3_x2` (that over ZeRO-3 x 2 with checkpointing, the CPU default before).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name -> config overrides
LAYOUTS = {
    "zero3x2-ckpt": ["trainer.zero_stage=3", "trainer.num_workers=2", "train.gradient_checkpointing=true"],
    "zero3x2": ["trainer.zero_stage=3", "trainer.num_workers=2", "train.gradient_checkpointing=false"],
    "zero1x2-ckpt": ["trainer.zero_stage=1", "trainer.num_workers=2", "train.gradient_checkpointing=true"],
    "zero1x2": ["trainer.zero_stage=1", "trainer.num_workers=2", "train.gradient_checkpointing=false"],
    "zero0x1-ckpt": ["trainer.zero_stage=0", "trainer.num_workers=1", "train.gradient_checkpointing=true",
                     "trainer.threads_per_worker=2"],
    "zero0x1": ["trainer.zero_stage=0", "trainer.num_workers=1", "train.gradient_checkpointing=false",
                "trainer.threads_per_worker=2"],
}
BEFORE = "zero3x2-ckpt"   # the CPU default this benchmark was written to improve on


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "embedded.yaml"))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per trajectory")
    p.add_argument("--batch", type=int, default=4, help="trajectories in the step")
    p.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma-separated, from {', '.join(LAYOUTS)}")
    p.add_argument("--json", default=None)
    return p.parse_args()


def matmul_peak_gflops(threads: int, n: int = 1536, repeats: int = 5) -> float:
    """Best fp32 GFLOP/s of an n x n matmul on `threads` threads: the ceiling a training step is held to."""
    import torch
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(previous)
    return 2 * n**3 / best / 1e9


def layout_of(cfg) -> str:
    """The LAYOUTS name of a config's trainer settings (None if it is none of them)."""
    for name, overrides in LAYOUTS.items():
        wanted = dict(o.split("=", 1) for o in overrides if "threads" not in o)
        actual = {"trainer.zero_stage": str(cfg.trainer.zero_stage), "trainer.num_workers": str(cfg.trainer.num_workers),
                  "train.gradient_checkpointing": str(cfg.train.gradient_checkpointing).lower()}
        if wanted == actual:
            return name
    return None


def run_layout(args, overrides: list[str]) -> dict:
    import ray

    from actors.ray_cluster import init_ray
    from actors.trainer import TrainerGroup
    from benchmarks.trainer_memory import synthetic_batch
    from sead_ray.core.config import load_config
    from sead_ray.core.models import resolve_model
    # no KL or entropy term: a step with zero advantages has no gradient (the warm-up leaves the weights)
    cfg = load_config(args.config, ["ray.dashboard=false", f"train.batch_size={args.batch}", "train.kl_coef=0",
                                    "train.entropy_coef=0", *overrides, *args.overrides])
    model = str(resolve_model(cfg.models.agent))
    from transformers import AutoConfig
    vocab = AutoConfig.from_pretrained(model).vocab_size
    batch = synthetic_batch(args.batch, args.seq_len, vocab)
    warm_up = [type(s)(s.token_ids[:256], s.loss_mask[:256], s.rollout_logprobs[:256], 0.0) for s in batch[:1]]
    init_ray(cfg)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            trainer = TrainerGroup(cfg, model, Path(tmp))
            try:
                trainer.start()
                trainer.step(warm_up)
                t0 = time.perf_counter()
                m = trainer.step(batch)
                wall = time.perf_counter() - t0
            finally:
                trainer.stop()
    finally:
        ray.shutdown()
    params = sum(r.total_params for r in trainer.ready[:1])
    seq_tokens = sum(len(s.token_ids) for s in batch)
    return {"step_s": wall, "trained_tokens": m.agent_tokens, "trained_tokens_per_s": m.agent_tokens / wall,
            "seq_tokens_per_s": seq_tokens / wall, "loss": m.loss, "grad_norm": m.grad_norm,
            "peak_mem_mb": m.peak_mem_mb, "params": params,
            # forward + backward of every sequence token, not counting checkpointing's recomputation
            "model_gflops_per_s": 6 * params * seq_tokens / wall / 1e9}


def main(args) -> dict:
    from sead_ray.core.config import load_config
    names = [n for n in args.layouts.split(",") if n]
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown:
        raise SystemExit(f"unknown layout(s) {unknown}; choose from {', '.join(LAYOUTS)}")
    cores = os.cpu_count() or 1
    peak = matmul_peak_gflops(cores)
    default = layout_of(load_config(args.config, args.overrides))
    results: dict = {"seq_len": args.seq_len, "batch": args.batch, "matmul_peak_gflops": peak, "default": default,
                     "layouts": {}}
    for name in names:
        print(f"layout {name} ...", flush=True)
        results["layouts"][name] = run_layout(args, LAYOUTS[name])

    rows = results["layouts"]
    print(f"\nGRPO step, {args.batch} trajectories x {args.seq_len} tokens; fp32 matmul peak {peak:.0f} GFLOP/s "
          f"on {cores} cores")
    print(f"{'layout':<16}{'step s':>8}{'trained tok/s':>15}{'of peak':>9}{'peak MB/worker':>16}{'loss':>12}"
          f"{'grad norm':>12}")
    for name, r in rows.items():
        mark = " (default)" if name == default else ""
        print(f"{name:<16}{r['step_s']:>8.1f}{r['trained_tokens_per_s']:>15.1f}{r['model_gflops_per_s'] / peak:>9.0%}"
              f"{r['peak_mem_mb']:>16.0f}{r['loss']:>12.6f}{r['grad_norm'] or 0:>12.6f}{mark}")
    reference = rows.get(BEFORE)
    if reference is not None:
        for r in rows.values():
            r["speedup_over_zero3_x2"] = r["trained_tokens_per_s"] / reference["trained_tokens_per_s"]
            r["loss_matches"] = abs(r["loss"] - reference["loss"]) <= 1e-4 * max(1.0, abs(reference["loss"]))
            r["grad_norm_matches"] = abs((r["grad_norm"] or 0) - (reference["grad_norm"] or 0)) <= 1e-3 * max(
                1.0, reference["grad_norm"] or 0)
        print("vs " + BEFORE + ": " + ", ".join(
            f"{n} x{r['speedup_over_zero3_x2']:.2f}{'' if r['loss_matches'] and r['grad_norm_matches'] else ' (MISMATCH)'}"
            for n, r in rows.items()))
    if default in rows:
        results["default_tokens_per_s"] = rows[default]["trained_tokens_per_s"]
        if reference is not None:
            results["speedup_over_zero3_x2"] = rows[default]["speedup_over_zero3_x2"]
    from benchmarks.weight_sync import cpu_flags
    results["machine"] = {"cores": cores, "cpu_flags": cpu_flags()}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(parse_args())
