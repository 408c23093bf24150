"""benchmarks/self_play_gain.py: the lr = 0 control starts from seed 0's warm start (files on disk, no run)."""
import importlib.util
import json

from sead_ray.training.checkpoint import latest_checkpoint, load_train_state
from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("self_play_gain", ROOT / "benchmarks" / "self_play_gain.py")
self_play_gain = importlib.util.module_from_spec(spec)
spec.loader.exec_module(self_play_gain)


def _finished_seed0(run):
    for iteration in (0, 8):
        folder = run / "checkpoints" / f"iter_{iteration:04d}"
        (folder / "hf").mkdir(parents=True)
        (folder / "hf" / "model.safetensors").write_bytes(bytes([iteration]) * 16)
        (folder / "state.json").write_text(json.dumps({"iteration": iteration, "controller": {},
                                                       "versions": {"agent": 16 + iteration}}))
    (run / "checkpoints" / "latest").symlink_to("iter_0008")
    (run / "dialogues").mkdir()
    for name in ("warm_start", "eval_0000", "iter_0001", "iter_0008", "eval_0008"):
        (run / "dialogues" / f"{name}.jsonl").write_text(json.dumps({"call": name}) + "\n")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i, "phase": p}) + "\n" for i, p in
                                               [(0, "warm_start"), (0, "eval"), (1, "train"), (8, "eval")]))
    (run / "eval_profiles.jsonl").write_text('{"held": "out"}\n')
    (run / "script-honest").mkdir()
    (run / "script-honest" / "dialogues.jsonl").write_text('{"script": 1}\n')
    (run / "config.yaml").write_text("seed: 0\ntrain:\n  lr: 1.0e-05\n")


def test_the_control_starts_from_seed_0s_warm_start_and_nothing_after_it(tmp_path):
    seed0, control = tmp_path / "seed0", tmp_path / "control"
    assert not self_play_gain.branch_from_warm_start(seed0, control)      # seed 0 not rehearsed yet: nothing done
    assert not control.exists()
    _finished_seed0(seed0)
    assert self_play_gain.branch_from_warm_start(seed0, control)
    checkpoint = latest_checkpoint(control)
    assert checkpoint == (control / "checkpoints" / "iter_0000").resolve()   # inside the control's own folder
    assert load_train_state(checkpoint).version("agent") == 16
    weights = "checkpoints/iter_0000/hf/model.safetensors"
    assert (control / weights).stat().st_ino == (seed0 / weights).stat().st_ino   # linked, not copied
    assert sorted(p.name for p in (control / "checkpoints").iterdir()) == ["iter_0000", "latest"]
    assert sorted(p.name for p in (control / "dialogues").iterdir()) == ["eval_0000.jsonl", "warm_start.jsonl"]
    assert [json.loads(line)["phase"] for line in (control / "metrics.jsonl").read_text().splitlines()] == \
        ["warm_start", "eval"]
    for name in ("eval_profiles.jsonl", "script-honest/dialogues.jsonl", "config.yaml"):
        assert (control / name).read_text() == (seed0 / name).read_text()
    assert not self_play_gain.branch_from_warm_start(seed0, control)      # started already: left as it is


def test_warm_start_from_refuses_a_run_rehearsed_on_another_scenario(tmp_path):
    import pytest
    source = tmp_path / "seed1"
    source.mkdir()
    restaurant = ROOT / "configs" / "scenarios" / "restaurant_promotion.yaml"
    (source / "config.yaml").write_text(f"seed: 1\nscenario: {restaurant}\n")
    config = str(ROOT / "configs" / "embedded.yaml")   # its scenario, the restaurant's, read from configs/
    self_play_gain.same_scenario(source, config, ["scenario=scenarios/restaurant_promotion.yaml"])   # the same: on
    self_play_gain.same_scenario(source, config, ["train.kl_coef=0.2"])                      # the config's own: on
    with pytest.raises(SystemExit, match="rehearsed on .*restaurant_promotion.yaml, not on .*charity_donation"):
        self_play_gain.same_scenario(source, config, ["scenario=scenarios/charity_donation.yaml"])
