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

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Optional

from sead_ray.agent.prompt import agent_messages, agent_turn_text, user_message_for_agent
from sead_ray.agent.scripted import HONEST, ScriptAgent, honest_replies
from sead_ray.agent.token_context import IncrementalChatEncoder
from sead_ray.curriculum.controller import ProfileController
from sead_ray.play.dialogue import Trajectory
from sead_ray.play.rollout import RolloutEndpoints, RolloutResult, run_dialogues, write_dialogues
from sead_ray.scenario.scenario import Scenario
from sead_ray.training.checkpoint import TrainState
from sead_ray.training.trainer_protocol import Sample

log = logging.getLogger(__name__)

WARM_START_SEED = 424_242      # its profile draws: apart from the training draws and the held-out set's
# A reply's first tokens choose what it says (which fact, the ask); the rest mostly copies a sentence and the estimate.
DECISION_TOKENS = 4


def decision_weighted(loss_mask: Sequence[int], turn_starts: Sequence[int], weight: float) -> list[float]:
    """The loss mask with each turn's first DECISION_TOKENS trained tokens weighing `weight` x the others, scaled so
    that the weights still sum to the number of trained tokens (the loss stays a token mean; only its emphasis
    moves). weight 1: the mask as it is."""
    if weight == 1.0:
        return list(loss_mask)
    weights = [float(m) for m in loss_mask]
    for start in turn_starts:
        for i in range(start, min(start + DECISION_TOKENS, len(weights))):
            weights[i] *= weight
    total, trained = sum(weights), sum(1 for m in loss_mask if m)
    return [w * trained / total for w in weights] if total else weights


def rehearsed_turn_ids(reply: str, scenario: Scenario, estimate: Any, tokenizer: Any, prefill: str) -> list[int]:
    """The tokens the rehearsal trains for one script turn: the turn in the agent's format after the prefill (which
    is context), and the end of turn."""
    raw = agent_turn_text(reply, scenario.schema, estimate)
    if not raw.startswith(prefill):
        raise ValueError(f"dialogue.agent_prefill {prefill!r} is not the start of the agent's format ({raw[:20]!r})")
    return list(tokenizer(raw[len(prefill):], add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]


def longest_script_turn_tokens(scenario: Scenario, tokenizer: Any, prefill: str = "") -> int:
    """The honest script's longest turn as the rehearsal teaches it (the agent must be let write that many tokens,
    or it learns a cut turn)."""
    return max(len(rehearsed_turn_ids(reply, scenario, scenario.schema.middle, tokenizer, prefill))
               for reply in honest_replies(scenario))


def caps_holding(cfg: Any, tokens: int) -> Any:
    """`cfg` with the agent's token caps (dialogue.agent_train, agent_eval) raised to `tokens` where lower. A cap
    under the rehearsed script's longest turn cuts that turn when the agent says it, and the agent, seeing its own cut
    turn in its context, copies the cut into every later turn (the gym domain's estimates: docs/results.md)."""
    d = cfg.dialogue
    raised = {name: replace(getattr(d, name), max_tokens=tokens) for name in ("agent_train", "agent_eval")
              if getattr(d, name).max_tokens < tokens}
    return replace(cfg, dialogue=replace(d, **raised)) if raised else cfg


def rehearsal_sample(call: Trajectory, scenario: Scenario, tokenizer: Any, max_seq_len: int,
                     prefill: str = "", decision_weight: float = 1.0) -> Optional[Sample]:
    """One call of the honest script as the agent would have written it, token by token in the agent's context
    (IncrementalChatEncoder, as in a rollout: `prefill` is context, the rest of each turn is in the loss), with
    advantage 1; `decision_weight`: see decision_weighted. None for a call with no turn."""
    if not call.turns:
        return None
    schema = scenario.schema
    encoder = IncrementalChatEncoder(tokenizer, agent_messages(scenario, [], []), prefill)
    seen = schema.middle if call.profile.free_form else call.profile.state
    turn_starts = []
    for i, turn in enumerate(call.turns):
        ids = rehearsed_turn_ids(turn.agent, scenario, seen, tokenizer, prefill)
        turn_starts.append(len(encoder.token_ids))
        encoder.add_generation(ids, [0.0] * len(ids))
        if turn.user_state is not None:
            seen = schema.from_mapping(turn.user_state)
        if i + 1 < len(call.turns):
            encoder.add_user(user_message_for_agent(scenario, turn.user or ""))
    return Sample(encoder.token_ids[:max_seq_len],
                  decision_weighted(encoder.loss_mask[:max_seq_len], turn_starts, decision_weight),
                  encoder.logprobs[:max_seq_len], 1.0)


def rehearsal_samples(calls: Sequence[Trajectory], scenario: Scenario, tokenizer: Any, max_seq_len: int,
                      prefill: str = "", decision_weight: float = 1.0) -> list[Sample]:
    """The won calls' samples (a lost call of the script is no example to follow)."""
    samples = [rehearsal_sample(c, scenario, tokenizer, max_seq_len, prefill, decision_weight)
               for c in calls if c.success]
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


async def rehearse(loop: Any) -> None:
    """The rehearsal on a self-evolution loop's system (sead_ray.training.loop.SelfEvolutionLoop): the honest script
    plays calls against the run's simulator on profiles drawn apart from every other draw; the agent fine-tunes on
    those it won, one step per train.warm_start_calls calls. The loop's state becomes iteration 0 at the version it
    reached (the loop checkpoints it, kept by every retention: `RUN@iter_0000`)."""
    cfg, scenario, train = loop.cfg, loop.scenario, loop.cfg.train
    endpoints = loop.system.endpoints()
    script = RolloutEndpoints(ScriptAgent(scenario, HONEST), endpoints.users, None, endpoints.engines)
    draws = ProfileController(scenario, replace(cfg.curriculum, mode="uniform", depth="off"), cfg.seed + WARM_START_SEED)
    version, calls, nll, step_s = loop.done.version("agent"), [], [], []
    for step in range(1, train.warm_start_steps + 1):
        rollout = await loop._unless_stopped(run_dialogues(
            script, cfg, scenario, draws.sample(train.warm_start_calls), iteration=0,
            phase=f"warm start {step}/{train.warm_start_steps}", training=True,
            seed_iteration=-step))
        samples = rehearsal_samples(rollout.played, scenario, endpoints.tokenizer, train.max_seq_len,
                                    cfg.dialogue.agent_prefill, train.warm_start_decision_weight)
        calls += rollout.trajectories
        if not samples:
            log.warning("warm start step %d: the honest script won none of its %d calls: nothing to learn from",
                        step, len(rollout.played))
            continue
        loop.weights_ahead = True
        metrics = await loop.system.grpo_step(samples, "agent", lr=train.warm_start_lr or None,
                                              reset_optimizer_after=step == train.warm_start_steps)
        version = (await loop.system.publish("agent")).version
        # the samples' "rollout" logprobs are 0, so the trainer's mismatch is the script turns' mean NLL
        nll.append(metrics.logprob_mismatch_mean)
        step_s.append(round(metrics.step_s, 2))
        weight = train.warm_start_decision_weight
        weighted = f", decision tokens x{weight:g}" if weight != 1 else ""
        log.info("warm start step %d/%d: %d script calls won of %d, NLL of their turns %.3f (%d tokens%s), step %.0f s; "
                 "weights v%d", step, train.warm_start_steps, len(samples), len(rollout.played), nll[-1] or 0.0,
                 metrics.agent_tokens, weighted, metrics.step_s, version)
    loop.done = TrainState(0, loop.done.controller, {**loop.done.versions, "agent": version})
    loop.weights_ahead = False
    played = RolloutResult(calls, 0.0, 0, endpoints.engines)
    records = write_dialogues(loop.run_dir / "dialogues" / "warm_start.jsonl", played, scenario)
    await loop.system.record_iteration(0, "warm_start", records, {
        "warm_start": train.warm_start, "warm_start_steps": train.warm_start_steps, "policy_version": version,
        "warm_start_nll": nll, "warm_start_step_s": step_s})
