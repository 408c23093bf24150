"""Where a GRPO step's time goes on the CPU demo (issue 36, item 5), read from finished runs: per taken step, the
tokens it trained on and how they split into the agent's system prompt (the same for every call: measured with the
run's tokenizer), the agent's own trained tokens and the rest of the context (the owner's turns, scripted turns,
chat markup); the step's seconds and tokens/s; the iteration's seconds. Given two runs (e.g. one without and one
with `train.drop_no_signal_calls`), also the ratios of the second to the first.

    python benchmarks/step_cost.py runs/demo
    python benchmarks/step_cost.py runs/before runs/after --json step_cost.json

A step's time follows its tokens (a forward and a backward pass over every token of every kept call); what can be
cut is tokens the step does not need: calls with no signal (advantage 0: no gradient) and context.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories (metrics.jsonl, config.yaml)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    return p.parse_args()


def system_prompt_tokens(run_dir: Path, cfg) -> int:
    """Tokens of the agent's system prompt and generation header, as every call of the run starts."""
    from transformers import AutoTokenizer

    from sead_ray.agent.prompt import agent_messages
    from sead_ray.scenario.scenario import load_scenario
    scenario = load_scenario(cfg.resolve_path(cfg.scenario))
    saved = sorted(run_dir.glob("checkpoints/iter_*/**/hf/tokenizer_config.json"))   # the run's own tokenizer
    tokenizer = AutoTokenizer.from_pretrained(saved[-1].parent)
    ids = tokenizer.apply_chat_template(agent_messages(scenario, [], []), tokenize=True, add_generation_prompt=True)
    return len(ids["input_ids"] if hasattr(ids, "keys") else ids)   # a BatchEncoding in recent transformers


def kept_calls(records: list[dict], drop_no_signal: bool) -> list[dict]:
    """The calls a step trained on: with `train.drop_no_signal_calls`, those of groups whose calls did not all end
    alike (the others have advantage 0)."""
    if not drop_no_signal:
        return records
    outcomes: dict = {}
    for r in records:
        outcomes.setdefault(r["group"], set()).add(r["outcome"] == "success")
    return [r for r in records if len(outcomes[r["group"]]) > 1]


def call_tokens(record: dict) -> int:
    """Tokens of a call as the trainer sees it: the last turn's context and the last turn."""
    last = record["turns"][-1]
    return int(last.get("agent_prompt_tokens") or 0) + int(last.get("agent_tokens") or 0)


def run_cost(run_dir: Path) -> dict:
    """Per taken step (train rows with a step): the calls kept, their tokens split, the seconds."""
    from sead_ray.core.config import load_config
    cfg = load_config(str(run_dir / "config.yaml"), [])
    drop = cfg.train.drop_no_signal_calls
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    prompt = system_prompt_tokens(run_dir, cfg)
    steps = []
    for r in rows:
        if r.get("phase") != "train" or not r.get("train_step_s"):
            continue
        path = run_dir / "dialogues" / f"iter_{r['iteration']:04d}.jsonl"
        calls = kept_calls([json.loads(line) for line in path.read_text().splitlines() if line.strip()], drop)
        tokens = sum(call_tokens(c) for c in calls)
        trained = sum(int(c.get("agent_tokens") or 0) for c in calls)
        steps.append({"iteration": r["iteration"], "calls_in_batch": r["n"], "calls_kept": len(calls),
                      "tokens": tokens, "system_prompt_tokens": prompt * len(calls), "trained_tokens": trained,
                      "step_s": r["train_step_s"], "iteration_s": r["iteration_s"]})
    if not steps:
        return {"run": str(run_dir), "steps": [], "prompt_tokens": prompt}
    total = {k: sum(s[k] for s in steps) for k in ("tokens", "system_prompt_tokens", "trained_tokens", "step_s")}
    return {"run": str(run_dir), "steps": steps, "prompt_tokens": prompt,
            "mean_step_s": total["step_s"] / len(steps),
            "mean_iteration_s": statistics.mean(s["iteration_s"] for s in steps),
            "mean_tokens_per_step": total["tokens"] / len(steps), "tokens_per_s": total["tokens"] / total["step_s"],
            "trained_tokens_per_s": total["trained_tokens"] / total["step_s"],
            "share_system_prompt": total["system_prompt_tokens"] / total["tokens"],
            "share_trained": total["trained_tokens"] / total["tokens"],
            "share_other_context": 1 - (total["system_prompt_tokens"] + total["trained_tokens"]) / total["tokens"]}


def main() -> int:
    args = parse_args()
    costs = [run_cost(Path(r)) for r in args.runs]
    for c in costs:
        print(f"\n{c['run']}: system prompt {c['prompt_tokens']} tokens a call")
        print("  iteration  calls kept  tokens  trained  step s  tokens/s  iteration s")
        for s in c["steps"]:
            print(f"  {s['iteration']:9d}  {s['calls_kept']:4d} of {s['calls_in_batch']:2d}  {s['tokens']:6d}  "
                  f"{s['trained_tokens']:7d}  {s['step_s']:6.0f}  {s['tokens'] / s['step_s']:8.0f}  "
                  f"{s['iteration_s']:11.0f}")
        if c["steps"]:
            print(f"  mean step {c['mean_step_s']:.0f} s over {c['mean_tokens_per_step']:.0f} tokens; "
                  f"{c['tokens_per_s']:.0f} tokens/s, {c['trained_tokens_per_s']:.1f} trained tokens/s; shares: system "
                  f"prompt {c['share_system_prompt']:.0%}, trained {c['share_trained']:.0%}, other context "
                  f"{c['share_other_context']:.0%}")
    ratios = {}
    if len(costs) == 2 and all(c["steps"] for c in costs):
        before, after = costs
        ratios = {k: after[k] / before[k] for k in ("mean_step_s", "mean_iteration_s", "mean_tokens_per_step",
                                                     "tokens_per_s", "trained_tokens_per_s")}
        print("\nsecond / first: " + ", ".join(f"{k} x{v:.2f}" for k, v in ratios.items()))
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": costs, "second_over_first": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
