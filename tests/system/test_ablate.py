"""`sead-ray ablate`: variants as config overrides, checked before any training; end to end on the tiny
model (each variant trained by `sead-ray train`, then compared); what was done is kept: a variant's finished
run is not trained again, and a second run keeps the comparison's calls too."""
import json
import shutil
import subprocess
import sys

import pytest

from sead_ray.core.config import load_config
from sead_ray.runs.ablate import VARIANTS, parse_seeds, parse_variants, train_command
from sead_ray.runs.inputs import UsageError
from tests.conftest import EMBEDDED_CONFIG, TEST_SETTING


def test_variants_are_the_papers_ablations_as_overrides(tmp_path):
    assert parse_variants("full, wo_ma,wo_ma_ps") == ["full", "wo_ma", "wo_ma_ps"]
    assert parse_variants("full,train_urm") == ["full", "train_urm"]
    for bad, message in (("full,full", "distinct"), ("nope", "unknown variant"), ("", "comma-separated")):
        with pytest.raises(UsageError, match=message):
            parse_variants(bad)
    assert parse_seeds("0,3") == [0, 3]
    for bad in ("a", "-1", "1,1", ""):
        with pytest.raises(UsageError):
            parse_seeds(bad)
    train_urm = load_config(EMBEDDED_CONFIG, VARIANTS["train_urm"])
    assert train_urm.user.train and train_urm.user.backend == "vllm"
    wo_ma_ps = load_config(EMBEDDED_CONFIG, VARIANTS["wo_ma_ps"])
    assert wo_ma_ps.curriculum.mode == "uniform" and not wo_ma_ps.curriculum.profile_sampling
    assert load_config(EMBEDDED_CONFIG, VARIANTS["full"]).curriculum.mode == "paper"
    fresh = train_command("c.yaml", ["seed=1"], tmp_path / "run")
    assert fresh[-6:] == ["--config", "c.yaml", "--set", "seed=1", "--out", str(tmp_path / "run")]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("")
    assert train_command("c.yaml", ["seed=1"], tmp_path / "run")[-2:] == ["--resume", str(tmp_path / "run")]


SETTINGS = ["models.agent=tiny:llama-h64", "user.backend=rule", "train.iterations=1", "train.batch_size=2",
            "train.micro_batch_size=1", "dialogue.max_turns=2", "dialogue.agent_train.max_tokens=12",
            "dialogue.agent_eval.max_tokens=12", "engine.kv_cache_mb=64", "engine.max_model_len=2048",
            "ray.dashboard=false", *TEST_SETTING]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ablate_trains_the_variants_it_lacks_compares_them_and_resumes(finished_run, tmp_path):
    cmd = [sys.executable, "-m", "sead_ray.cli.main", "ablate", "--config", str(EMBEDDED_CONFIG), "--variants",
           "full,wo_ma_ps", "--seeds", "0", "--n", "3", "--seed", "1", "--out", str(tmp_path / "ab")]
    for s in SETTINGS:
        cmd += ["--set", s]
    # as if an earlier `ablate` had been stopped after its first variant: that run (here the session's finished
    # run, trained by `sead-ray train` on the same tiny model) is resumed, finds nothing to do, and is compared
    full = tmp_path / "ab" / "runs" / "full-s0"
    shutil.copytree(finished_run.path, full, symlinks=True)
    full_metrics = (full / "metrics.jsonl").read_text()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("nothing to do") == 1 and (full / "metrics.jsonl").read_text() == full_metrics
    table = (tmp_path / "ab" / "ablation.md").read_text()
    assert "| full-s0 |" in table and "| wo_ma_ps-s0 |" in table
    rows = json.loads((tmp_path / "ab" / "compare" / "compare.json").read_text())
    assert [r["agent"] for r in rows] == ["full-s0", "wo_ma_ps-s0"] and all(r["n"] == 3 for r in rows)
    # the second checkpoint played on the engine the first one started (actors.rollout_roles.EvaluationRoles)
    assert proc.stderr.count("its weights loaded into the running engine") == 1, proc.stderr[-3000:]
    run = tmp_path / "ab" / "runs" / "wo_ma_ps-s0"
    profiles = [json.loads(line)["profile"] for line in (run / "dialogues" / "iter_0001.jsonl").read_text().splitlines()]
    assert all(p.get("free_form") for p in profiles), profiles   # w/o PS: no sampled state reached the simulator
    metrics_before = (run / "metrics.jsonl").read_text()

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing to do" in again.stderr and (run / "metrics.jsonl").read_text() == metrics_before
    # nor played again: the same weights, settings and profiles keep their calls
    assert again.stderr.count("evaluated before with the same weights") == 2, again.stderr[-3000:]
    assert json.loads((tmp_path / "ab" / "compare" / "compare.json").read_text()) == rows
