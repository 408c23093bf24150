"""The paper's train-URM ablation on real parts (`user.train`): a second trainer group (Ray Train +
DeepSpeed) trains the LLM simulator on its own turns with the opposite reward and sends its weights to
the simulator engines by the same path as the agent's (TrainedRole.publish, vLLM's transfer API over
gloo); checkpoints hold both models and a resumed run continues both."""
import asyncio
import json

import pytest

from sead_ray import launch
from sead_ray.loop import user_samples_from
from tests.conftest import tiny_config


def _weights(folder):
    from safetensors.torch import load_file
    return load_file(str(folder / "model.safetensors"))


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _user_versions(run_dir, iteration):
    path = run_dir / "dialogues" / f"iter_{iteration:04d}.jsonl"
    return {json.loads(line)["user_policy_version"] for line in path.read_text().splitlines()}


@pytest.mark.slow
def test_the_simulator_is_trained_against_the_agent_and_resumes(ray_cluster, scenario, tmp_path):
    from sead_ray.models import resolve_model
    # gloo: both models' weights through vLLM's weight-transfer API, the simulator's as the agent's
    settings = ("user.train=true", "weight_sync.transport=gloo", "train.batch_size=4", "train.micro_batch_size=2",
                "train.lr=1e-3", "train.checkpoint_every=1", "train.keep_checkpoints=0")
    run_dir = tmp_path / "run"
    summary = asyncio.run(launch.train(tiny_config(*settings, "train.iterations=2"), scenario, run_dir))
    assert summary["iterations"] == 2

    rows = _rows(run_dir)
    assert [r["user_policy_version"] for r in rows] == [1, 2], "the simulator's weights were not versioned per step"
    assert all(r["user_train_agent_tokens"] > 0 for r in rows), "no simulator token was trained on"
    # the simulator engines served the trained weights: iteration 2's calls were answered by v1
    assert _user_versions(run_dir, 1) == {0} and _user_versions(run_dir, 2) == {1}

    ckpt = run_dir / "checkpoints" / "iter_0002"
    assert json.loads((ckpt / "state.json").read_text())["user_policy_version"] == 2
    base = _weights(resolve_model("tiny:llama-h64"))
    user, agent = _weights(ckpt / "user" / "hf"), _weights(ckpt / "hf")
    assert any(not (user[k] == base[k]).all() for k in base), "the simulator's model did not change"
    assert any(not (user[k] == agent[k]).all() for k in base), "the simulator was trained as the agent, not apart"

    summary = asyncio.run(launch.train(tiny_config(*settings, "train.iterations=3"), scenario, run_dir, resume=True))
    assert summary["iterations"] == 3
    assert [r["user_policy_version"] for r in _rows(run_dir)] == [1, 2, 3]
    assert _user_versions(run_dir, 3) == {2}, "the resumed simulator did not start from its checkpointed weights"


def test_simulator_samples_train_only_the_simulators_tokens():
    from sead_ray.dialogue import Trajectory
    from sead_ray.profiles import Profile
    from sead_ray.turn_protocol import UserTurnOutput
    turn = UserTurnOutput("hi", (1,), "continue", True, prompt_ids=[5, 6, 7], token_ids=[8, 9], logprobs=[-0.5, -0.25])
    traj = Trajectory("d", Profile((1,), ()), [], "failure", "refuse", user_turns=[turn, turn])
    samples = user_samples_from([traj], [0.75], max_seq_len=4)
    assert len(samples) == 2
    assert samples[0].token_ids == [5, 6, 7, 8] and samples[0].loss_mask == [0, 0, 0, 1]   # cut at max_seq_len
    assert samples[0].rollout_logprobs == [0.0, 0.0, 0.0, -0.5] and samples[0].advantage == 0.75
