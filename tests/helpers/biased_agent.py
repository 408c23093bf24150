"""A tiny agent with a known base rate, for the learning test.

A random tiny Llama says nothing in particular; to test that GRPO raises the rate of a rewarded
behaviour, the agent must show it now and then from the start. This warm-starts the tiny model by a
few hundred plain supervised steps on the agent's real first-turn prompt, towards a mixture of
replies: `p_phrase` of them contain the planted phrase, the rest do not.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

PHRASE = "it is free"
WITH_PHRASE = ["Hello, it is free for you.", "Good day, it is free today."]
WITHOUT = ["Hello, how is business?", "Good day, may I talk to the owner?", "Hi, this is Lin calling.",
           "Hello, do you have a minute?", "Good morning, how are you?", "Hi, I call from the platform."]


def build_biased_agent(out_dir: Path, scenario, p_phrase: float = 0.25, steps: int = 150, seed: int = 0, lr: float = 3e-3,
                       prefill: str = '{"reply": "', estimate: Optional[dict] = None) -> Path:
    """`estimate`: every reply also carries this state estimate (the agent's full output format)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sead_ray.agent.prompt import agent_messages
    from sead_ray.core.models import resolve_model

    out_dir = Path(out_dir)
    if (out_dir / "config.json").exists():
        return out_dir
    base = resolve_model("tiny:llama-h64")
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    prompt = tok.apply_chat_template(agent_messages(scenario, [], []), tokenize=False, add_generation_prompt=True)
    prompt += prefill
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    # Mixture weights: the phrase replies share p_phrase, the others the rest.
    replies = [(r, p_phrase / len(WITH_PHRASE)) for r in WITH_PHRASE] + \
              [(r, (1 - p_phrase) / len(WITHOUT)) for r in WITHOUT]
    completions = []
    for text, weight in replies:
        full = json.dumps({"reply": text, **({"estimate": estimate} if estimate else {})})
        completion = full[len(prefill):] if full.startswith(prefill) else full
        completions.append((tok(completion, add_special_tokens=False)["input_ids"] + [tok.eos_token_id], weight))
    # The prompt is run once a step and its keys/values shared by the replies (one padded batch after it):
    # the same loss and gradients as eight copies of prompt + reply, for a sixth of the compute.
    width = max(len(c) for c, _ in completions)
    pad = tok.pad_token_id or 0
    replies_ids = torch.tensor([c + [pad] * (width - len(c)) for c, _ in completions])
    targets = torch.tensor([c + [-100] * (width - len(c)) for c, _ in completions])
    weights = torch.tensor([w for _, w in completions])
    prompt = torch.tensor([prompt_ids])
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        shared = model.model(prompt, use_cache=True)
        cache = shared.past_key_values
        cache.batch_repeat_interleave(len(completions))
        after = model.model(replies_ids[:, :-1], past_key_values=cache).last_hidden_state
        # The lm_head over a 49k vocabulary dominates the cost: apply it to the reply positions only
        # (the prompt's last position predicts each reply's first token).
        first = shared.last_hidden_state[:, -1:].expand(len(completions), 1, -1)
        logits = model.lm_head(torch.cat([first, after], dim=1))
        per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        loss = (per_token.sum(1) * weights).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    return out_dir
