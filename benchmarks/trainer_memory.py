"""GRPO step memory and time of the TrainerGroup (Ray Train + DeepSpeed ZeRO-3), with and without
gradient checkpointing, side by side on the same batch.

    python benchmarks/trainer_memory.py                          # embedded SmolLM2-135M, 4 calls of ~1,800 tokens
    python benchmarks/trainer_memory.py --seq-len 1024 --batch 8 --set trainer.num_workers=1

The batch imitates a 6-turn call of the embedded config: a long shared prompt, then agent turns
(trained tokens, 1 in the loss mask) between user turns. Each setting gets fresh workers, so the
peak memory (CPU: the worker process's peak RSS; GPU: peak allocated) belongs to that setting alone.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "embedded.yaml"))
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--seq-len", type=int, default=1800, help="tokens per trajectory")
    p.add_argument("--batch", type=int, default=4, help="trajectories in the step")
    p.add_argument("--json", default=None)
    return p.parse_args()


def synthetic_batch(n: int, seq_len: int, vocab: int, seed: int = 0) -> list:
    """Trajectories shaped like the embedded config's calls: prompt ~45 %, then 6 agent turns of
    ~50 tokens between user turns; alternating advantages so the gradient is not zero."""
    import random

    from sead_ray.training.trainer_protocol import Sample
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ids = [rng.randrange(100, vocab) for _ in range(seq_len)]
        mask = [0] * seq_len
        start, turn = int(seq_len * 0.45), (seq_len - int(seq_len * 0.45)) // 6
        for t in range(6):
            for j in range(start + t * turn, min(seq_len, start + t * turn + min(50, turn // 2))):
                mask[j] = 1
        logprobs = [-2.0 if m else 0.0 for m in mask]
        out.append(Sample(ids, mask, logprobs, 1.0 if i % 2 == 0 else -1.0))
    return out


def main(args) -> dict:
    import ray

    from actors.ray_cluster import init_ray
    from actors.trainer import TrainerGroup
    from sead_ray.core.config import load_config
    from sead_ray.core.models import resolve_model

    results: dict = {"seq_len": args.seq_len, "batch": args.batch, "settings": {}}
    for checkpointing in (False, True):
        cfg = load_config(args.config, ["ray.dashboard=false", f"train.batch_size={args.batch}",
                                        f"train.gradient_checkpointing={str(checkpointing).lower()}"] + args.overrides)
        model = str(resolve_model(cfg.models.agent))
        from transformers import AutoConfig
        vocab = AutoConfig.from_pretrained(model).vocab_size
        init_ray(cfg)
        with tempfile.TemporaryDirectory() as tmp:
            trainer = TrainerGroup(cfg, model, Path(tmp))
            try:
                trainer.start()
                t0 = time.perf_counter()
                m = trainer.step(synthetic_batch(args.batch, args.seq_len, vocab))
                wall = time.perf_counter() - t0
            finally:
                trainer.stop()
        ray.shutdown()
        results["model"], results["workers"] = cfg.models.agent, cfg.trainer.num_workers
        results["micro_batch_size"] = cfg.train.micro_batch_size
        results["settings"]["on" if checkpointing else "off"] = {
            "step_s": wall, "peak_mem_mb": m.peak_mem_mb, "tokens_per_s": m.tokens_per_s,
            "loss": m.loss, "grad_norm": m.grad_norm}

    off, on = results["settings"]["off"], results["settings"]["on"]
    results["memory_ratio_off_over_on"] = off["peak_mem_mb"] / on["peak_mem_mb"]
    results["time_ratio_on_over_off"] = on["step_s"] / off["step_s"]
    print(f"\nGRPO step of {results['model']}: {args.batch} trajectories x {args.seq_len} tokens, "
          f"{results['workers']} ZeRO-{cfg.trainer.zero_stage} worker(s), micro-batch {results['micro_batch_size']}")
    print(f"{'gradient checkpointing':<24}{'peak MB / worker':>18}{'step s':>10}{'tokens/s':>10}{'grad norm':>12}")
    for key in ("off", "on"):
        s = results["settings"][key]
        print(f"{key:<24}{s['peak_mem_mb']:>18.0f}{s['step_s']:>10.1f}{s['tokens_per_s']:>10.1f}{s['grad_norm']:>12.4g}")
    print(f"checkpointing: peak memory / {results['memory_ratio_off_over_on']:.2f}, "
          f"step time x {results['time_ratio_on_over_off']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(parse_args())
