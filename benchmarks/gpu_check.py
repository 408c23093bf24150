"""GPU check for the single-H200 check machine: torch and transformers only, nothing downloaded.

    python benchmarks/gpu_check.py --out gpu_check.json            # on the GPU machine (~2-4 min)
    python benchmarks/gpu_check.py --out gpu_check.json --small    # anywhere (CPU: the CUDA parts are skipped)

The check machine has the image's torch and transformers and no vLLM, DeepSpeed or Ray; at most 64 MiB of
files travel with the repository and nothing can be downloaded there. So this script needs nothing else:
no carried wheels (DeepSpeed, a 14B checkpoint or a tokenizer are not needed), a model built from a config
with random weights (memory and time do not depend on their values), and the project's own pure modules
(`sead_ray.training.grpo`, `sead_ray.ops.memory_plan`, which import neither Ray nor vLLM). What it cannot prove
there (NOT_PROVEN, printed at the end and kept in the JSON's summary): NCCL across ranks, vLLM's engines and
DeepSpeed's ZeRO-3 partitioning (the plan's shard lines).

Each check prints one line (`ok`, `FAIL` with the error, or `skip` with the reason) and the script goes on
past a failure; the JSON (--out) is written again after every check.
  device      the GPU's name and memory; the torch, transformers, CUDA and driver versions
  context     the CUDA context's size, against memory_plan.CUDA_CONTEXT_BYTES
  allocator   the trainer's allocator setting (expandable segments) takes effect
  nccl        the shipped `nccl` weight path as far as torch alone goes: an NCCL process group of one rank,
              the weights packed into `weight_sync.bucket_mb` buffers, broadcast, unpacked and compared;
              the communicator's memory against memory_plan.NCCL_COMMUNICATOR_BYTES (CPU: gloo)
  model       a Qwen2.5-14B-shaped model cut to --layers layers with the full vocabulary, from a config
  logits_to_keep  transformers computes logits only at the positions asked (a tensor, as the trainer passes
              them, and an int): a version that ignores them would have the trainer read the wrong positions
  grpo_step   one GRPO micro-step (sead_ray.training.grpo: logits of the trained positions, clipped loss, backward,
              AdamW) on one call of --seq tokens of which --trained are the agent's; torch's
              max_memory_allocated per phase against the plan's lines for the same shape and config
  logprobs    the trainer's bf16 logprobs against an fp32 reference of the same weights
  throughput  trained tokens/s and step time over --steps steps
  shared_prefix  the trainer's shared prefix (sead_ray.training.shared_prefix) against the per-call path: 4 calls
              sharing a system prompt of half the call, two of them a scripted turn more, 2 micro-batches; logprobs
              and gradients of one GRPO update, in the model's dtype (bf16 on a GPU: max |logprob difference|
              <= 0.05 and gradients within a relative 0.02, the rounding of bf16 over two orders of summation; fp32
              on CPU: 1e-4 and 1e-4), and both paths' time
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GIB = 2**30

# What one GPU with torch and transformers alone cannot prove, and what does
NOT_PROVEN = {
    "nccl across ranks": "the nccl check's group has one rank, so no byte crosses a link: the 2-GPU smoke run "
                         "(configs/smoke_qwen2.5_0.5b_2gpu.yaml) sends the weights between processes over NCCL",
    "vllm": "no engine starts here (no vLLM): CUDA graphs, the KV cache and the weight-transfer receiver are "
            "the smoke run's",
    "deepspeed zero-3": "one ZeRO-0 step here: the partitioned shards, gathers and offload are the runs' (the "
                        "plan's shard lines are computed, not measured)",
}


class Checks:
    """Runs each check, prints one line, keeps going past failures, writes the JSON after every check."""

    def __init__(self, out: str):
        self.out, self.results, self.figures = out, {}, {}

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            value = fn()
        except SkipCheck as skip:
            self.results[name] = {"status": "skip", "reason": str(skip)}
            print(f"[skip] {name}: {skip}", flush=True)
            value = None
        except Exception as exc:   # a check's failure is reported, the next check still runs
            self.results[name] = {"status": "fail", "error": f"{type(exc).__name__}: {exc}",
                                  "traceback": traceback.format_exc(limit=4)}
            print(f"[FAIL] {name}: {type(exc).__name__}: {exc}", flush=True)
            value = None
        else:
            figures = value if isinstance(value, dict) else {}
            self.results[name] = {"status": "ok", **{k: v for k, v in figures.items() if not k.startswith("_")}}
            shown = ", ".join(f"{k}={_fmt(v)}" for k, v in figures.items() if not k.startswith("_"))
            print(f"[ok] {name}: {shown}", flush=True)
        self.results[name]["seconds"] = round(time.perf_counter() - t0, 3)
        self.write()
        return value

    def write(self) -> None:
        if self.out:
            Path(self.out).write_text(json.dumps(self.results, indent=2))


class SkipCheck(Exception):
    """A check that cannot run here; its message says why."""


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def versions(cuda: bool) -> dict:
    """torch, transformers, the CUDA torch was built for and the NVIDIA driver (None where there is none)."""
    import subprocess

    import torch
    import transformers
    driver = None
    if cuda:
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.split("\n")[0].strip() or None
        except (OSError, subprocess.SubprocessError):
            driver = None
    return {"torch": torch.__version__, "transformers": transformers.__version__, "cuda": torch.version.cuda,
            "driver": driver}


def build_model(args, dtype):
    """A Qwen2.5-14B-shaped model (or a small one) cut to `args.layers` layers, random weights, from a config."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=max(4096, args.seq),
                         tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = Qwen2ForCausalLM(config).to(dtype)
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def plan_config(args, dtype_name: str):
    """The run config whose plan describes this step: one ZeRO-0 rank, one call of --seq tokens, --trained of
    them the agent's (as max_turns turns of max_tokens)."""
    from sead_ray.core.config import load_config
    turns = max(1, args.trained // 64)
    return load_config(ROOT / "configs" / "embedded.yaml", [
        f"models.dtype={dtype_name}", "trainer.num_workers=1", "trainer.zero_stage=0", "train.micro_batch_size=1",
        f"train.max_seq_len={args.seq}", f"train.gradient_checkpointing={str(args.checkpointing).lower()}",
        f"dialogue.max_turns={turns}", f"dialogue.agent_train.max_tokens={args.trained // turns}",
        "train.entropy_coef=0.0", "train.kl_coef=0.0"])


def one_call_batch(args, pad_id: int = 0):
    """One call of --seq tokens whose last --trained positions (in spans of 64, as agent turns) are trained."""
    import torch

    from sead_ray.training.grpo import collate
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, args.vocab, (args.seq,), generator=g).tolist()
    mask = [0] * args.seq
    span, gap = 64, max(0, (args.seq - args.trained) // max(1, args.trained // 64))
    pos, left = args.seq - 1, args.trained
    while left > 0 and pos > 0:             # agent turns of 64 tokens between user turns, from the end back
        for _ in range(min(span, left)):
            mask[pos] = 1
            pos, left = pos - 1, left - 1
        pos -= gap
    old = [-1.0 if m else 0.0 for m in mask]
    return collate([ids], [mask], [old], [1.0], pad_id=pad_id)


def main(args) -> dict:
    import torch
    cuda = torch.cuda.is_available() and not args.cpu
    args.device = "cuda" if cuda else "cpu"
    checks = Checks(args.out)
    no_cuda = "no CUDA device here (CPU): skipped"

    def device():
        if not cuda:
            return {"device": "cpu", **versions(cuda)}
        p = torch.cuda.get_device_properties(0)
        return {"device": p.name, "memory_gib": round(p.total_memory / GIB, 2), **versions(cuda)}
    checks.run("device", device)

    def context():
        if not cuda:
            raise SkipCheck(no_cuda)
        from sead_ray.ops.memory_plan import CUDA_CONTEXT_BYTES
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        free, total = torch.cuda.mem_get_info()
        ctx = total - free - torch.cuda.memory_reserved()
        return {"context_gib": round(ctx / GIB, 3), "plan_gib": round(CUDA_CONTEXT_BYTES / GIB, 3),
                "within_plan": ctx <= CUDA_CONTEXT_BYTES}
    checks.run("context", context)

    def allocator():
        if not cuda:
            raise SkipCheck(no_cuda)
        from sead_ray.training.trainer_protocol import CUDA_ALLOC_CONF
        torch.cuda.memory._set_allocator_settings(CUDA_ALLOC_CONF)
        x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        del x
        return {"setting": CUDA_ALLOC_CONF}
    checks.run("allocator", allocator)

    def nccl():
        import torch.distributed as dist

        from sead_ray.core.config_schema import WeightSyncConfig
        from sead_ray.ops.memory_plan import NCCL_COMMUNICATOR_BYTES
        backend = "nccl" if cuda else "gloo"
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        free0 = torch.cuda.mem_get_info()[0] if cuda else 0
        reserved0 = torch.cuda.memory_reserved() if cuda else 0
        dist.init_process_group(backend, rank=0, world_size=1, device_id=torch.device("cuda", 0) if cuda else None)
        try:
            # the weights as the trainer's rank 0 sends them: packed into bucket_mb buffers, broadcast, unpacked
            torch.manual_seed(2)
            weights = {f"layers.{i}.w": torch.randn(1024, 1024 + i, dtype=torch.bfloat16, device=args.device)
                       for i in range(24)}
            bucket = WeightSyncConfig().bucket_mb << 20
            received: dict = {}

            def send(names: list) -> None:
                flat = torch.cat([weights[n].reshape(-1).view(torch.uint8) for n in names])
                dist.broadcast(flat, src=0)
                offset = 0
                for n in names:
                    size = weights[n].numel() * weights[n].element_size()
                    received[n] = flat[offset:offset + size].view(torch.bfloat16).view(weights[n].shape)
                    offset += size
            packed: list = []
            for name, w in weights.items():
                if packed and sum(weights[n].numel() * 2 for n in packed) + w.numel() * 2 > bucket:
                    send(packed)
                    packed = []
                packed.append(name)
            send(packed)
            if cuda:
                torch.cuda.synchronize()
            same = all(torch.equal(received[n], weights[n]) for n in weights)
            out = {"backend": backend, "tensors": len(weights), "bucket_mb": bucket >> 20, "identical": same}
            if cuda:   # device memory taken outside torch's allocator: the communicator's buffers
                used = (free0 - torch.cuda.mem_get_info()[0]) - (torch.cuda.memory_reserved() - reserved0)
                out.update(communicator_gib=round(max(0, used) / GIB, 3),
                           plan_gib=round(NCCL_COMMUNICATOR_BYTES / GIB, 3))
            else:
                out["note"] = "gloo stands in for NCCL on CPU"
        finally:
            dist.destroy_process_group()
        if not same:
            raise AssertionError("weights changed in the packed broadcast")
        return out
    checks.run("nccl", nccl)

    dtype = torch.bfloat16 if cuda else torch.float32
    dtype_name = "bfloat16" if cuda else "float32"
    state: dict = {}

    def model():
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if cuda else 0
        m = build_model(args, dtype)
        state["model"] = m
        params = sum(p.numel() for p in m.parameters())
        from sead_ray.ops.memory_plan import trainer_plan
        from sead_ray.ops.model_shape import ModelShape
        shape = ModelShape("cut", args.layers, args.hidden, args.intermediate, args.heads, args.kv_heads, args.vocab)
        state["shape"], state["plan"] = shape, trainer_plan(plan_config(args, dtype_name), shape)
        out = {"params_m": round(params / 1e6, 1), "plan_params_m": round(shape.params / 1e6, 1),
               "layers": args.layers, "vocab": args.vocab}
        if cuda:
            out["allocated_gib"] = round((torch.cuda.memory_allocated() - base) / GIB, 3)
            out["plan_gib"] = round(state["plan"]["parameters"] / GIB, 3)
        if abs(params - shape.params) > 0.01 * params:
            raise AssertionError(f"the plan's parameter count {shape.params} is not the model's {params}")
        return out
    checks.run("model", model)

    def logits_to_keep():
        if "model" not in state:
            raise SkipCheck("no model (the model check failed)")
        import transformers
        ids = torch.randint(1, args.vocab, (1, 64), generator=torch.Generator().manual_seed(3)).to(args.device)
        positions = torch.tensor([3, 17, 40, 62], device=args.device)
        with torch.no_grad():
            full = state["model"](input_ids=ids).logits
            asked = {"a tensor of 4 positions": (positions, full[:, positions]), "the int 5": (5, full[:, -5:])}
            for what, (keep, want) in asked.items():
                got = state["model"](input_ids=ids, logits_to_keep=keep).logits
                if got.shape != want.shape:
                    raise AssertionError(
                        f"transformers {transformers.__version__} ignored logits_to_keep = {what}: logits of shape "
                        f"{tuple(got.shape)}, {tuple(want.shape)} expected; the trainer "
                        "(sead_ray.training.grpo.forward_logprobs) would read its logprobs at the wrong positions")
                if not torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2):
                    raise AssertionError(f"transformers {transformers.__version__}: the logits kept for {what} are "
                                         "not the full forward's at those positions")
        return {"transformers": transformers.__version__, "tensor_positions": len(positions), "int": 5}
    checks.run("logits_to_keep", logits_to_keep)

    def grpo_step():
        if "model" not in state:
            raise SkipCheck("no model (the model check failed)")
        from sead_ray.training.grpo import forward_logprobs, policy_loss
        m, plan = state["model"], state["plan"]
        batch = one_call_batch(args)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-6, foreach=False)
        mem = {}

        def mark(phase):
            if cuda:
                torch.cuda.synchronize()
                mem[phase] = torch.cuda.max_memory_allocated()
                torch.cuda.reset_peak_memory_stats()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        static = torch.cuda.memory_allocated() if cuda else 0
        t0 = time.perf_counter()
        logprobs, entropy = forward_logprobs(m, batch, args.device, with_entropy=True)
        mask = batch.loss_mask.to(args.device)
        loss, stats = policy_loss(logprobs, logprobs.detach(), batch.advantages.to(args.device), mask, 0.2,
                                  entropy=entropy, normalizer=float(mask.sum()))
        mark("forward")
        loss.backward()
        mark("backward")
        opt.step()
        opt.zero_grad(set_to_none=False)
        mark("optimizer")
        step_s = time.perf_counter() - t0
        state["step_s"] = step_s
        out = {"trained_tokens": int(mask.sum()), "seq": args.seq, "loss": float(loss.detach()), "step_s": round(step_s, 3)}
        if not cuda:
            out["memory"] = "max_memory_allocated needs CUDA: not compared on CPU"
            out["plan_lines"] = len(plan)
            return out
        # what the step adds over the weights: the plan's activations, logits, entropy chunk and gradients
        # (ZeRO-0: full-size), the optimizer's states (torch AdamW in the model's dtype here: 2 x bf16, not the
        # plan's fp32 m, v and master) as measured after the step
        b = 2
        plan_fb = sum(v for k, v in plan.items() if k.startswith(("activations", "logits", "entropy", "gradients")))
        measured_fb = max(mem["forward"], mem["backward"]) - static
        out.update(forward_peak_gib=round((mem["forward"] - static) / GIB, 3),
                   backward_peak_gib=round((mem["backward"] - static) / GIB, 3),
                   plan_step_gib=round(plan_fb / GIB, 3), measured_over_plan=round(measured_fb / plan_fb, 3),
                   optimizer_peak_gib=round((mem["optimizer"] - static) / GIB, 3),
                   adam_states_gib=round(2 * state["shape"].params * b / GIB, 3))
        logits_key = next(k for k in plan if k.startswith("logits"))
        out["plan_logits_gib"] = round(plan[logits_key] / GIB, 3)
        return out
    checks.run("grpo_step", grpo_step)

    def logprobs():
        if "model" not in state:
            raise SkipCheck("no model (the model check failed)")
        if not cuda:
            raise SkipCheck("bf16 vs fp32 is a GPU question (the CPU trainer runs fp32): skipped")
        import copy

        from sead_ray.training.grpo import forward_logprobs
        batch = one_call_batch(args)
        m = state["model"]
        with torch.no_grad():
            low, _ = forward_logprobs(m, batch, args.device)
            ref_model = copy.deepcopy(m).float()
            ref, _ = forward_logprobs(ref_model, batch, args.device)
            del ref_model
        mask = batch.loss_mask.to(args.device).bool()
        diff = (low.float() - ref)[mask].abs()
        return {"max_abs_diff": float(diff.max()), "mean_abs_diff": float(diff.mean()), "tokens": int(mask.sum())}
    checks.run("logprobs", logprobs)

    def throughput():
        if "model" not in state:
            raise SkipCheck("no model (the model check failed)")
        from sead_ray.training.grpo import forward_logprobs, policy_loss
        m, batch = state["model"], one_call_batch(args)
        mask = batch.loss_mask.to(args.device)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            lp, _ = forward_logprobs(m, batch, args.device)
            loss, _ = policy_loss(lp, lp.detach(), batch.advantages.to(args.device), mask, 0.2,
                                  normalizer=float(mask.sum()))
            loss.backward()
            m.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        best = min(times)
        return {"steps": args.steps, "best_step_s": round(best, 4), "seq_tokens_per_s": round(args.seq / best, 1),
                "trained_tokens_per_s": round(int(mask.sum()) / best, 1)}
    checks.run("throughput", throughput)

    def shared_prefix():
        if "model" not in state:
            raise SkipCheck("no model (the model check failed)")
        from sead_ray.training.grpo import ModelForward, grpo_update, micro_batches
        from sead_ray.training.shared_prefix import install, shared_root
        from sead_ray.training.trainer_protocol import Sample, TrainerSettings
        m, g = state["model"], torch.Generator().manual_seed(5)
        install(m)
        system = torch.randint(1, args.vocab, (args.seq // 2,), generator=g).tolist()
        scripted = torch.randint(1, args.vocab, (args.seq // 8,), generator=g).tolist()
        samples = []
        for i in range(4):
            n = args.seq // 4 + 16 * i
            ids = system + (scripted if i < 2 else []) + torch.randint(1, args.vocab, (n,), generator=g).tolist()
            mask = [0] * (len(ids) - n) + [1 if (j // 32) % 2 else 0 for j in range(n)]
            samples.append(Sample(ids, mask, [-1.0 if x else 0.0 for x in mask], 1.0 if i % 2 else -0.5))
        settings = TrainerSettings(model_path="", seed=0, dtype=dtype_name, lr=0.0, zero_stage=0, micro_batch_size=2,
                                   grad_accum_steps=2, grad_clip=1.0, clip_eps=0.2, kl_coef=0.0, entropy_coef=0.0,
                                   ppo_epochs=1, max_seq_len=args.seq, gradient_checkpointing=args.checkpointing)
        runs = {}
        for name, root in (("per_call", []), ("shared", shared_root([s.token_ids for s in samples],
                                                                     [s.loss_mask for s in samples], args.seq))):
            m.zero_grad(set_to_none=True)
            batches = micro_batches(samples, 2, 0, args.seq, pad_to=2, root=root)
            t0 = time.perf_counter()
            result = grpo_update(ModelForward(m, args.device), lambda loss: (loss / 2).backward(), batches, settings,
                                 rank=0, world_size=1, global_tokens=sum(sum(s.loss_mask) for s in samples), root=root)
            if cuda:
                torch.cuda.synchronize()
            runs[name] = (time.perf_counter() - t0, result, {n: p.grad.float() for n, p in m.named_parameters()
                                                              if p.grad is not None})
        (t_call, want, want_g), (t_shared, got, got_g) = runs["per_call"], runs["shared"]
        m.zero_grad(set_to_none=True)
        # the summed |logprob - rollout logprob| over the same tokens: equal logprobs give equal sums
        logprob_diff = abs(got.mismatch_sum - want.mismatch_sum) / max(1, want.tokens)
        grad_diff = max(float((got_g[n] - want_g[n]).norm() / want_g[n].norm().clamp(min=1e-30)) for n in want_g)
        limits = (0.05, 0.02) if dtype_name == "bfloat16" else (1e-4, 1e-4)
        out = {"dtype": dtype_name, "mean_logprob_diff": logprob_diff, "max_grad_rel_diff": grad_diff,
               "tolerance": list(limits), "per_call_s": round(t_call, 3), "shared_s": round(t_shared, 3),
               "speedup": round(t_call / t_shared, 2), "root_tokens": len(shared_root(
                   [s.token_ids for s in samples], [s.loss_mask for s in samples], args.seq))}
        if logprob_diff > limits[0] or grad_diff > limits[1]:
            raise AssertionError(f"the shared prefix differs from the per-call path beyond {limits}: {out}")
        return out
    checks.run("shared_prefix", shared_prefix)

    failed = [k for k, v in checks.results.items() if v["status"] == "fail"]
    checks.results["summary"] = {"status": "fail" if failed else "ok", "failed": failed,
                                 "skipped": [k for k, v in checks.results.items() if v.get("status") == "skip"],
                                 "not_proven": NOT_PROVEN}
    checks.write()
    print(f"summary: {len(failed)} failed, {len(checks.results['summary']['skipped'])} skipped", flush=True)
    print("not proven here (one GPU; torch and transformers only):\n"
          + "\n".join(f"  {name}: {why}" for name, why in NOT_PROVEN.items()), flush=True)
    return checks.results


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="", help="JSON file, rewritten after every check")
    p.add_argument("--small", action="store_true", help="a small model and call (the CPU test's size)")
    p.add_argument("--cpu", action="store_true", help="stay on the CPU even where CUDA is available")
    p.add_argument("--layers", type=int, default=4, help="layers of the 14B-shaped model (default 4)")
    p.add_argument("--seq", type=int, default=8192, help="tokens of the call")
    p.add_argument("--trained", type=int, default=3840, help="agent tokens of the call (15 turns x 256)")
    p.add_argument("--steps", type=int, default=3, help="steps timed for throughput")
    p.add_argument("--no-checkpointing", dest="checkpointing", action="store_false",
                   help="store every layer's activations (the plan's other case)")
    args = p.parse_args(argv)
    # Qwen2.5-14B's shape (sead_ray.ops.memory_plan.KNOWN_SHAPES) with the full vocabulary
    args.hidden, args.intermediate, args.heads, args.kv_heads, args.vocab = 5120, 13824, 40, 8, 152064
    if args.small:
        args.hidden, args.intermediate, args.heads, args.kv_heads, args.vocab = 64, 128, 4, 2, 512
        args.layers, args.seq, args.trained, args.steps = 2, 256, 128, 2
    return args


if __name__ == "__main__":
    results = main(parse_args())
    sys.exit(1 if results["summary"]["status"] == "fail" else 0)
