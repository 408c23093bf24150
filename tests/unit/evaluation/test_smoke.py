"""The smoke run's verdict (sead_ray/evaluation/smoke.py) and the planted preference it trains under."""
import pytest

from sead_ray.evaluation.smoke import smoke_checks
from sead_ray.training.rewards import REWARDS
from tests.conftest import tiny_config


def rows(**changes):
    first = {"phase": "train", "iteration": 1, "policy_version": 1, "train_skipped": 0, "train_grad_norm": 0.8,
             "sync_verified": True, "train_logprob_mismatch_mean": 0.0}
    second = {"phase": "train", "iteration": 2, "policy_version": 2, "train_skipped": 0, "train_grad_norm": 0.7,
              "sync_verified": True, "train_logprob_mismatch_mean": 0.012, "train_logprob_mismatch_max": 0.4}
    for key, value in changes.items():
        iteration, name = key.split("__")
        (first if iteration == "it1" else second)[name] = value
    return [{"phase": "eval", "iteration": 1}, first, second]


CALLS = [{"policy_versions": [1]}, {"policy_versions": [1]}]


def failed(checks):
    return [c.name for c in checks if not c.ok]


def test_a_run_whose_version_1_reached_the_engines_passes():
    checks = smoke_checks(rows(), CALLS, 0.05)
    assert failed(checks) == [] and [c.name for c in checks] == ["step", "digests", "versions", "logprobs"]


@pytest.mark.parametrize("changes, calls, why", [
    ({"it1__train_skipped": 1}, CALLS, "step"),              # no signal: the weights never changed
    ({"it1__train_grad_norm": 0.0}, CALLS, "step"),
    ({"it1__sync_verified": None}, CALLS, "digests"),        # weight_sync.verify off: nothing proven
    ({"it2__sync_verified": False}, CALLS, "digests"),
    ({}, [{"policy_versions": [0]}, {"policy_versions": [1]}], "versions"),   # a call still on the old weights
    ({}, [{"policy_versions": [0, 1]}], "versions"),
    ({}, [], "versions"),
    ({"it2__train_logprob_mismatch_mean": 0.3}, CALLS, "logprobs"),          # bytes arrived, the engine uses others
    ({"it2__train_logprob_mismatch_mean": None}, CALLS, "logprobs"),
])
def test_each_way_a_weight_path_can_fail_fails_its_check(changes, calls, why):
    assert failed(smoke_checks(rows(**changes), calls, 0.05)) == [why]


def test_an_unfinished_run_fails_naming_the_missing_iteration():
    checks = smoke_checks(rows()[:2], CALLS, 0.05)
    assert failed(checks) == ["run"] and "iteration 2" in checks[0].detail


class Call:
    def __init__(self, chars, success=False):
        self.policy_chars, self.success, self.agent_parse_failures, self.agenda_gain = chars, success, 0, None


def test_the_planted_preference_prefers_shorter_calls_whatever_they_won():
    reward, train = REWARDS.get("planted_brevity"), tiny_config().train
    assert reward(Call(40), train) > reward(Call(90, success=True), train)
    assert reward(Call(40), train) == pytest.approx(-0.04)
    with pytest.raises(ValueError, match="planted_brevity"):
        reward(Call(None), train)


def test_the_viewer_reads_the_same_planted_reward_from_a_record():
    from sead_ray.view.calls import summarizer
    record = {"profile": {"cooperation": 1, "emotion": 1, "trust": 1, "behaviors": []}, "outcome": "failure",
              "turns": [{"agent_raw": "x" * 30, "scripted": True}, {"agent_raw": "y" * 40}, {"agent_raw": "z" * 5}]}
    summary = summarizer(("cooperation", "emotion", "trust"))(record)
    assert summary.policy_chars == 45   # the scripted turn is not the policy's
    assert REWARDS.get("planted_brevity")(summary, tiny_config().train) == pytest.approx(-0.045)
