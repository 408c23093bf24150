"""Each shared prefix computed once (issue 49): one GRPO step on the same batch with `trainer.shared_prefix` off and
auto, side by side in one run, each on fresh trainer workers from the same weights (a warm-up step with zero
advantage leaves them as they were), the config's trainer layout (the demo's: one ZeRO-0 worker on both cores).

    python benchmarks/shared_prefix_step.py --run runs/demo --iteration 1    # a demo step's calls, its warm-started agent
    python benchmarks/shared_prefix_step.py --paper                          # the paper's shape, on the tiny model

A run's calls are rebuilt in the agent's context from its dialogues file (system prompt, scripted turns, the agent's
raw turns, the owner's replies), the calls the step trained on (with train.drop_no_signal_calls, those of groups
whose calls did not all end alike), with their group-centred outcome as advantage; the model is the run's
warm-started agent (iteration 0's checkpoint). `--paper`: a long system prompt (the SOP and facts of a real
deployment), groups of 8 calls of one profile, half of them started at a depth (scripted turns shared by the group).

Printed per setting: step seconds, tokens/s (every token of the calls), trained tokens/s, peak memory of the worker,
loss and grad norm (the first timed step; equal in both settings, or the shared path is wrong, not fast). The limit:
`ideal` = tokens in the batch / tokens in its prefix tree (each untrained shared prefix counted once), and `two-level`
= the same for the tree the trainer computes (the batch's root once, each micro-batch's shared tokens once).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a finished run directory (config.yaml, dialogues/, checkpoints/)")
    source.add_argument("--paper", action="store_true", help="a paper-shaped synthetic batch on the tiny model")
    p.add_argument("--iteration", type=int, default=1, help="with --run: the iteration whose calls make the batch")
    p.add_argument("--all-calls", action="store_true", help="with --run: every call of the iteration, also those of "
                   "groups that all ended alike (the step without train.drop_no_signal_calls)")
    p.add_argument("--system-tokens", type=int, default=3000, help="--paper: tokens of the system prompt")
    p.add_argument("--groups", type=int, default=4, help="--paper: groups of 8 calls")
    p.add_argument("--repeats", type=int, default=2, help="timed steps per setting (the fastest is reported)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    return p.parse_args()


# --------------------------------------------------------------------------- batches

def rebuilt_call(record: dict, scenario, tokenizer, prefill: str, advantage: float):
    """A call of a dialogues file as the trainer received it (the agent's turns re-tokenized from their text)."""
    from sead_ray.agent.prompt import agent_messages, user_message_for_agent
    from sead_ray.agent.token_context import IncrementalChatEncoder
    from sead_ray.training.trainer_protocol import Sample
    encoder = IncrementalChatEncoder(tokenizer, agent_messages(scenario, [], []), prefill)
    turns = record["turns"]
    for i, turn in enumerate(turns):
        if turn.get("scripted"):
            encoder.add_scripted(turn["agent_raw"])
        else:
            text = turn["agent_raw"][len(prefill):] if turn["agent_raw"].startswith(prefill) else turn["agent_raw"]
            ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(ids) < int(turn.get("agent_tokens") or 0):   # it ended on its end-of-turn token
                ids.append(tokenizer.eos_token_id)
            encoder.add_generation(ids, [-1.0] * len(ids))
        if turn.get("user") is not None and i + 1 < len(turns):
            encoder.add_user(user_message_for_agent(scenario, turn["user"]))
    return Sample(encoder.token_ids, encoder.loss_mask, encoder.logprobs, advantage)


def run_batch(args) -> tuple[str, list, list[str], str]:
    """(model, samples, config overrides, what the batch is) of a run's step."""
    from transformers import AutoTokenizer

    from sead_ray.core.config import load_config
    from sead_ray.scenario.scenario import load_scenario
    from sead_ray.training.grpo import compute_advantages
    run = Path(args.run)
    cfg = load_config(str(run / "config.yaml"), [])
    scenario = load_scenario(cfg.resolve_path(cfg.scenario))
    hf = sorted(run.glob("checkpoints/iter_0000/**/hf/config.json"))
    if not hf:
        raise SystemExit(f"{run}: no checkpoints/iter_0000/.../hf (the warm-started agent)")
    model = str(hf[0].parent)
    tokenizer = AutoTokenizer.from_pretrained(model)
    prefill = cfg.dialogue.agent_prefill
    path = run / "dialogues" / f"iter_{args.iteration:04d}.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records = [r for r in records if r.get("end_reason") != "error"]
    if cfg.train.drop_no_signal_calls and not args.all_calls:
        outcomes: dict = {}
        for r in records:
            outcomes.setdefault(r["group"], set()).add(r["outcome"] == "success")
        kept = [r for r in records if len(outcomes[r["group"]]) > 1]
    else:
        kept = records
    advantages = compute_advantages([float(r["outcome"] == "success") for r in kept], [r["group"] for r in kept],
                                    "group_mean")
    samples = [rebuilt_call(r, scenario, tokenizer, prefill, a) for r, a in zip(kept, advantages)]
    depths = sorted({len(r["turns"]) - len([t for t in r["turns"] if not t.get("scripted")]) for r in kept})
    return model, samples, [], (f"{run} iteration {args.iteration}: {len(samples)} calls kept of {len(records)}, "
                                f"scripted turns {depths}")


def paper_batch(args) -> tuple[str, list, list[str], str]:
    """A long system prompt, groups of 8 calls of one profile; half the groups start 2 scripted turns deep."""
    from sead_ray.core.models import resolve_model
    from sead_ray.training.trainer_protocol import Sample
    rng = random.Random(0)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(100, 20_000) for _ in range(n)]
    system = tokens(args.system_tokens)
    samples = []
    for group in range(args.groups):
        scripted = tokens(160) if group % 2 else []          # two scripted turns and the owner's replies
        for _ in range(8):
            ids, mask = system + scripted, [0] * (len(system) + len(scripted))
            for _turn in range(6):
                agent, user = tokens(rng.randrange(30, 90)), tokens(rng.randrange(20, 60))
                ids, mask = ids + agent + user, mask + [1] * len(agent) + [0] * len(user)
            samples.append(Sample(ids, mask, [-1.0 if m else 0.0 for m in mask], rng.choice((-1.0, 1.0))))
    overrides = ["models.agent=tiny:llama-h64", f"train.batch_size={args.groups}", "train.rollouts_per_profile=8",
                 "train.max_seq_len=8192"]
    return str(resolve_model("tiny:llama-h64")), samples, overrides, (
        f"paper-shaped: {len(samples)} calls, {args.groups} groups of 8, system prompt {args.system_tokens} tokens")


# --------------------------------------------------------------------------- the limit

def tree_tokens(samples, micro_batch_size: int, max_seq_len: int) -> dict:
    """Tokens of the batch, of its full prefix tree (every untrained shared prefix once) and of the two-level tree
    the trainer computes."""
    from sead_ray.training.grpo import micro_batches
    from sead_ray.training.shared_prefix import shared_root, trainable_prefix_len
    total = sum(len(s.token_ids) for s in samples)
    nodes: set = set()
    own = 0
    for s in samples:
        n = trainable_prefix_len(s.token_ids, s.loss_mask)
        nodes.update(tuple(s.token_ids[:i + 1]) for i in range(n))   # a trie node per shared-able prefix
        own += len(s.token_ids) - n
    root = shared_root([s.token_ids for s in samples], [s.loss_mask for s in samples], max_seq_len)
    two_level = len(root)
    for b in micro_batches(samples, micro_batch_size, 0, max_seq_len, root=root):
        lengths = b.attention_mask.sum(1).tolist()
        two_level += (b.shared_len - len(root)) + sum(n - b.shared_len for n in lengths)
    return {"tokens": total, "tree_tokens": len(nodes) + own, "two_level_tokens": two_level, "root_tokens": len(root),
            "ideal": total / (len(nodes) + own), "two_level_ideal": total / two_level}


# --------------------------------------------------------------------------- the steps

def one_setting(config: str, overrides: list[str], model: str, samples: list, repeats: int) -> dict:
    import ray

    from actors.ray_cluster import init_ray
    from actors.trainer import TrainerGroup
    from sead_ray.core.config import load_config
    from sead_ray.training.trainer_protocol import Sample
    cfg = load_config(config, ["ray.dashboard=false", "train.kl_coef=0", "train.entropy_coef=0", *overrides])
    first = samples[0]
    warm_up = [Sample(first.token_ids, first.loss_mask, first.rollout_logprobs, 0.0)]   # no gradient: same weights
    init_ray(cfg)
    steps = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            trainer = TrainerGroup(cfg, model, Path(tmp))
            try:
                trainer.start()
                trainer.step(warm_up)
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    m = trainer.step(samples)
                    steps.append((time.perf_counter() - t0, m))
            finally:
                trainer.stop()
    finally:
        ray.shutdown()
    fastest = min(s for s, _ in steps)
    first_metrics = steps[0][1]
    tokens = sum(len(s.token_ids) for s in samples)
    return {"step_s": fastest, "step_s_all": [round(s, 2) for s, _ in steps], "tokens_per_s": tokens / fastest,
            "trained_tokens_per_s": first_metrics.agent_tokens / fastest, "loss": first_metrics.loss,
            "grad_norm": first_metrics.grad_norm, "peak_mem_mb": max(m.peak_mem_mb or 0 for _, m in steps)}


def main(args) -> dict:
    model, samples, overrides, what = run_batch(args) if args.run else paper_batch(args)
    config = str(Path(args.run) / "config.yaml") if args.run else str(ROOT / "configs" / "embedded.yaml")
    from sead_ray.core.config import load_config
    cfg = load_config(config, [*overrides, *args.overrides])
    limit = tree_tokens(samples, cfg.train.micro_batch_size, cfg.train.max_seq_len)
    print(f"{what}\n{limit['tokens']} tokens; prefix tree {limit['tree_tokens']} (ideal x{limit['ideal']:.2f}); "
          f"the trainer's two-level tree {limit['two_level_tokens']} (x{limit['two_level_ideal']:.2f}), root "
          f"{limit['root_tokens']} tokens; micro-batches of {cfg.train.micro_batch_size}", flush=True)
    settings = {}
    for mode in ("off", "auto"):
        print(f"trainer.shared_prefix={mode} ...", flush=True)
        settings[mode] = one_setting(config, [*overrides, *args.overrides, f"trainer.shared_prefix={mode}"], model,
                                     samples, args.repeats)
    off, on = settings["off"], settings["auto"]
    speedup = on["tokens_per_s"] / off["tokens_per_s"]
    print(f"\n{'shared_prefix':<14}{'step s':>8}{'tokens/s':>10}{'trained tok/s':>15}{'peak MB':>9}{'loss':>13}"
          f"{'grad norm':>12}")
    for mode, r in settings.items():
        print(f"{mode:<14}{r['step_s']:>8.1f}{r['tokens_per_s']:>10.0f}{r['trained_tokens_per_s']:>15.1f}"
              f"{r['peak_mem_mb']:>9.0f}{r['loss']:>13.6f}{r['grad_norm'] or 0:>12.6f}")
    print(f"auto / off: x{speedup:.2f} tokens/s (ideal x{limit['ideal']:.2f}: {speedup / limit['ideal']:.0%} of it; "
          f"two-level x{limit['two_level_ideal']:.2f}: {speedup / limit['two_level_ideal']:.0%}), peak memory "
          f"x{on['peak_mem_mb'] / off['peak_mem_mb']:.2f}; loss equal: "
          f"{abs(on['loss'] - off['loss']) <= 1e-4 * max(1.0, abs(off['loss']))}, grad norm equal: "
          f"{abs((on['grad_norm'] or 0) - (off['grad_norm'] or 0)) <= 1e-3 * max(1.0, off['grad_norm'] or 0)}")
    results = {"batch": what, "calls": len(samples), "micro_batch_size": cfg.train.micro_batch_size, **limit,
               "settings": settings, "speedup": speedup, "share_of_ideal": speedup / limit["ideal"],
               "mean_call_tokens": statistics.mean(len(s.token_ids) for s in samples)}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(parse_args())
