"""The smoke run's checks on a real local cluster: a tiny agent trains 2 iterations under the planted preference
(train.reward = planted_brevity) through the real trainer, weight sync and engine, and
benchmarks/smoke_check.py passes its four checks on the run (the GPU smoke configs run the same on GPUs)."""
import asyncio

from benchmarks.smoke_check import main as smoke_check
from sead_ray.runs.train import train
from tests.conftest import tiny_config


def test_a_two_iteration_run_under_the_planted_preference_passes_the_smoke_checks(ray_cluster, scenario, tmp_path,
                                                                                   capsys):
    cfg = tiny_config("user.backend=rule", "train.reward=planted_brevity", "train.iterations=2", "train.batch_size=4",
                      "train.lr=1e-3", "dialogue.agent_train.max_tokens=24", "weight_sync.transport=gloo")
    asyncio.run(train(cfg, scenario, tmp_path / "run"))
    assert smoke_check([str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:4]] == [["ok", "step"], ["ok", "digests"], ["ok", "versions"],
                                                         ["ok", "logprobs"]], lines
