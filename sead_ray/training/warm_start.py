"""SOP rehearsal, a warm start before self-play (`train.warm_start: sop_rehearsal`; off, `none`, in the paper's
config): the scenario's honest script, built from its SOP and facts (no human dialogue), plays calls against the
run's own simulator, and the agent is fine-tuned on the calls the script won, in the agent's own format.

Why: a small agent that never wins a call gives GRPO nothing to learn from (every advantage 0); every multi-turn
dialogue RL result at small sizes starts from behaviour cloning. The teacher is the script, the target format is the
agent's: each agent turn is `{"reply": the script's words, "estimate": the state the agent last heard}` (the
simulator's true state then, so the agent also learns to estimate), all in the loss, with advantage 1: on the
trainer's GRPO step with one epoch the ratio is exactly 1, so the step is the token-level mean negative
log-likelihood of these turns (supervised fine-tuning), on the same trainer group, optimizer and weight path.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Optional

from sead_ray.agent.prompt import agent_messages, user_message_for_agent
from sead_ray.agent.token_context import IncrementalChatEncoder
from sead_ray.play.dialogue import Trajectory
from sead_ray.scenario.scenario import Scenario
from sead_ray.training.trainer_protocol import Sample

WARM_START_SEED = 424_242      # its profile draws: apart from the training draws and the held-out set's


def rehearsal_sample(call: Trajectory, scenario: Scenario, tokenizer: Any, max_seq_len: int,
                     prefill: str = "") -> Optional[Sample]:
    """One call of the honest script as the agent would have written it, token by token in the agent's context
    (IncrementalChatEncoder, as in a rollout: `prefill` is context, the rest of each turn is in the loss), with
    advantage 1. None for a call with no turn."""
    if not call.turns:
        return None
    schema = scenario.schema
    encoder = IncrementalChatEncoder(tokenizer, agent_messages(scenario, [], []), prefill)
    seen = schema.middle if call.profile.free_form else call.profile.state
    for i, turn in enumerate(call.turns):
        raw = json.dumps({"reply": turn.agent, "estimate": schema.to_dict(seen)})
        if not raw.startswith(prefill):
            raise ValueError(f"dialogue.agent_prefill {prefill!r} is not the start of the agent's format ({raw[:20]!r})")
        ids = list(tokenizer(raw[len(prefill):], add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
        encoder.add_generation(ids, [0.0] * len(ids))
        if turn.user_state is not None:
            seen = schema.from_mapping(turn.user_state)
        if i + 1 < len(call.turns):
            encoder.add_user(user_message_for_agent(scenario, turn.user or ""))
    return Sample(encoder.token_ids[:max_seq_len], encoder.loss_mask[:max_seq_len],
                  encoder.logprobs[:max_seq_len], 1.0)


def rehearsal_samples(calls: Sequence[Trajectory], scenario: Scenario, tokenizer: Any, max_seq_len: int,
                      prefill: str = "") -> list[Sample]:
    """The won calls' samples (a lost call of the script is no example to follow)."""
    samples = [rehearsal_sample(c, scenario, tokenizer, max_seq_len, prefill) for c in calls if c.success]
    return [s for s in samples if s is not None and sum(s.loss_mask)]


def reset_optimizer_state(optimizer: Any) -> int:
    """Clear the optimizer's per-parameter state (Adam's moments and step count) after the rehearsal: carried into
    self-play, the supervised steps' momentum would keep pushing the rehearsal's direction and their larger second
    moments would shrink the policy gradient's first steps (measured on the demo: with the moments carried, 6
    iterations left the held-out cold calls at 3/32; cleared, 8 took them to 8/32). Unwraps DeepSpeed's ZeRO
    optimizers to the torch optimizer they step; returns the number of parameters whose state was cleared."""
    import torch
    inner = optimizer
    while not isinstance(inner, torch.optim.Optimizer) and hasattr(inner, "optimizer"):
        inner = inner.optimizer
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError(f"no torch optimizer inside {type(optimizer).__name__}")
    cleared = len(inner.state)
    inner.state.clear()
    return cleared
