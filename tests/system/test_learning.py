"""The loop provably learns: a tiny agent against the `rule` simulator with a planted preference
(the user accepts only when the agent says "it is free") goes from its base rate (~25 %) to a
clearly higher success rate. Gradients, loss masks, advantages and the weight broadcast must all
work together for this to pass."""
import asyncio
import json

import pytest

from sead_ray.runs.train import train
from tests.conftest import tiny_config
from tests.helpers.biased_agent import PHRASE, build_biased_agent

pytestmark = pytest.mark.slow


def test_grpo_raises_the_success_rate_of_a_planted_preference(ray_cluster, scenario, tmp_path):
    agent = build_biased_agent(tmp_path / "agent", scenario, p_phrase=0.25)
    cfg = tiny_config(
        f"models.agent={agent}", "user.backend=rule", f"user.rule.accept_phrase={PHRASE}",
        "user.rule.patience=10", "user.status_guards=false", "dialogue.max_turns=1",
        "dialogue.agent_train.max_tokens=24",
        "train.batch_size=16", "train.micro_batch_size=8", "train.lr=2e-3", "train.iterations=10",
        "train.checkpoint_every=0", "curriculum.mode=uniform", "seed=1")
    summary = asyncio.run(train(cfg, scenario, tmp_path / "run"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    crs = [r["cr"] for r in rows]
    before, after = sum(crs[:2]) / 2, sum(crs[-2:]) / 2
    print(f"learning test: CR per iteration {crs}; before {before:.2f}, after {after:.2f}, "
          f"{summary['wall_s']:.0f} s for {len(rows)} iterations")
    assert len(rows) == cfg.train.iterations and summary["interrupted"] is False
    assert before <= 0.5, crs
    assert after >= before + 0.3 and after >= 0.6, crs
    # the weight broadcast happened every iteration and dialogues record the version that played them
    assert [r["policy_version"] for r in rows] == list(range(1, cfg.train.iterations + 1))
    last = [json.loads(line) for line in (tmp_path / "run" / "dialogues" / f"iter_{cfg.train.iterations:04d}.jsonl")
            .read_text().splitlines()]
    assert {d["policy_version"] for d in last} == {cfg.train.iterations - 1}
