"""The CLI as users run it: real subprocesses, real files."""
import json
import subprocess
import sys

import pytest

from tests.conftest import EMBEDDED_CONFIG, ROOT
from tests.unit.evaluation.test_metrics import HAND


def sead(*args, check=False):
    proc = subprocess.run([sys.executable, "-m", "sead_ray.cli.main", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr)
    return proc


def _command_paths(parser=None, prefix=()):
    """Every command and subcommand the parser knows (so a new one is covered without editing this)."""
    import argparse

    from sead_ray.cli.main import build_parser
    parser = parser or build_parser()
    yield list(prefix)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _command_paths(sub, (*prefix, name))


COMMAND_PATHS = list(_command_paths())


def test_the_help_test_sees_every_subcommand():
    assert {"train", "eval", "report", "metrics", "profiles sample", "models prepare"} <= \
        {" ".join(p) for p in COMMAND_PATHS}


@pytest.mark.parametrize("args", COMMAND_PATHS, ids=lambda a: " ".join(a) or "sead-ray")
def test_every_command_explains_itself(args):
    proc = sead(*args, "--help")
    assert proc.returncode == 0
    assert "usage: sead-ray" in proc.stdout and len(proc.stdout) > 200


def test_profiles_sample_acceptance(tmp_path):
    out1, out2 = tmp_path / "p.jsonl", tmp_path / "q.jsonl"
    sead("profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 60, "--seed", 7, "--out", out1, check=True)
    sead("profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 60, "--seed", 7, "--out", out2, check=True)
    assert out1.read_bytes() == out2.read_bytes()
    rows = [json.loads(line) for line in out1.read_text().splitlines()]
    categories = json.loads((ROOT / "sead_ray" / "data" / "sead_behaviors.json").read_text())
    library = {b.strip() for items in categories["User_Persona_Classification"].values() for b in items}
    assert len(rows) == 60
    assert len({(r["cooperation"], r["emotion"], r["trust"], tuple(sorted(r["behaviors"]))) for r in rows}) == 60
    for r in rows:
        assert 0 <= r["cooperation"] <= 4 and 0 <= r["emotion"] <= 3 and 0 <= r["trust"] <= 5
        assert 1 <= len(r["behaviors"]) <= 3 and set(r["behaviors"]) <= library


def test_impossible_sample_fails_fast_with_exit_2(tmp_path):
    proc = sead("profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 100000, "--seed", 7, "--out", tmp_path / "x")
    assert proc.returncode == 2 and "N_max" in proc.stderr and not (tmp_path / "x").exists()


def test_bad_config_exits_2_naming_key_and_file(tmp_path):
    proc = sead("profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 1, "--out", tmp_path / "x",
                "--set", "curriculum.n_max=-3")
    assert proc.returncode == 2 and "curriculum.n_max" in proc.stderr and "embedded.yaml" in proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  batchsize: 4\n")
    proc = sead("profiles", "sample", "--config", bad, "--n", 1, "--out", tmp_path / "x")
    assert proc.returncode == 2 and "unknown key 'train.batchsize'" in proc.stderr and "bad.yaml" in proc.stderr


def test_metrics_json_and_errors(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text("".join(json.dumps(d) + "\n" for d in HAND))
    out = json.loads(sead("metrics", f, "--json", check=True).stdout)
    assert out["n"] == 3 and out["cr"] == pytest.approx(2 / 3) and out["att"] == pytest.approx(3.0)
    assert set(out) == {"n", "cr", "att", "att_std", "upa", "ei", "ti", "ci"}
    table = sead("metrics", f, check=True).stdout
    assert "66.7 %" in table
    f.write_text("")
    assert json.loads(sead("metrics", f, "--json", check=True).stdout)["att"] is None
    f.write_text(json.dumps(HAND[0]) + "\n[1, 2]\n")
    proc = sead("metrics", f)
    assert proc.returncode == 2 and "d.jsonl:2" in proc.stderr
    proc = sead("metrics", tmp_path / "missing.jsonl")
    assert proc.returncode == 2 and "cannot read" in proc.stderr


@pytest.mark.slow
def test_eval_cli_writes_what_metrics_reproduces(tmp_path):
    """`sead-ray eval` end to end in its own process (own Ray cluster, real agent engine, rule user)."""
    out = tmp_path / "ev"
    proc = sead("eval", "--config", EMBEDDED_CONFIG, "--agent", "tiny:llama-h64", "--n", 2, "--user-sets", "soft,hard",
                "--seed", 0, "--out", out,
                "--set", "user.backend=rule", "--set", "dialogue.max_turns=3", "--set", "ray.dashboard=false",
                "--set", "dialogue.agent_eval.max_tokens=12", "--set", "engine.kv_cache_mb=64",
                "--set", "engine.max_model_len=2048", "--set", "engine.cpu_bind=nobind")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CR (completion rate)" in proc.stdout and "dialogues / s" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["decoding"]["temperature"] == 0.0 and summary["profiles"] == "4 profiles sampled with seed 0"
    # two profiles from each user set, each set reported apart
    assert {k: v["n"] for k, v in summary["by_user_set"].items()} == {"soft": 2, "hard": 2}
    assert "user set hard" in proc.stdout
    recomputed = json.loads(sead("metrics", out / "dialogues.jsonl", "--json", check=True).stdout)
    for key, value in recomputed.items():
        assert summary[key] == (pytest.approx(value) if value is not None else None), key
    assert len((out / "profiles.jsonl").read_text().splitlines()) == 4
    assert (out / "config.yaml").exists() and list((out / "tensorboard").iterdir())
    # the profiles file replays the same set (here to a scripted agent: no engine to start again)
    again = tmp_path / "ev2"
    proc = sead("eval", "--config", EMBEDDED_CONFIG, "--agent", "script:honest", "--profiles", out / "profiles.jsonl",
                "--out", again, "--set", "user.backend=rule", "--set", "dialogue.max_turns=3",
                "--set", "ray.dashboard=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = [json.loads(line) for line in (out / "dialogues.jsonl").read_text().splitlines()]
    second = [json.loads(line) for line in (again / "dialogues.jsonl").read_text().splitlines()]
    assert [d["profile"] for d in first] == [d["profile"] for d in second]
    assert {k: v["n"] for k, v in json.loads((again / "summary.json").read_text())["by_user_set"].items()} == \
        {"soft": 2, "hard": 2}
