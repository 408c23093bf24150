"""Every bad input is exit code 2 with a one-line message naming the file, line or key, never a traceback.

`sead_ray.cli.main.main` runs in this process; every case fails before Ray would start (and Ray's start is
replaced by a failure, so a case that got that far fails instead of starting a cluster).
"""
from __future__ import annotations

import argparse
import json
import logging

import pytest
import yaml

from sead_ray.cli.main import main
from sead_ray.core.config_schema import ConfigError
from tests.conftest import EMBEDDED_CONFIG, SCENARIO
from tests.unit.evaluation.test_metrics import HAND

NOT_UTF8 = b"\xff\xfe\x00not utf-8\n"
RULE = ("--set", "user.backend=rule")
AGENT = ("--agent", "tiny:llama-h64")


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("this bad input got as far as starting Ray")
    monkeypatch.setattr("actors.ray_cluster.init_ray", refuse)   # sead_ray.runs.cluster.connect calls it
    monkeypatch.delenv("SEAD_RAY_API_KEY", raising=False)   # the cases without a key must not find one


def sead(capsys, *args) -> tuple[int, str]:
    """Exit code and stderr of `sead-ray ARGS` run in this process."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as exc:   # argparse's usage errors
        rc = exc.code
    return rc, capsys.readouterr().err


# --------------------------------------------------------------------------- input files

def _scenario_tree() -> dict:
    return yaml.safe_load(SCENARIO.read_text())


def _scenario_with(tmp, **rule_user) -> str:
    tree = _scenario_tree()
    tree["rule_user"].update(rule_user)
    return _write(tmp / "scen.yaml", yaml.safe_dump(tree))


def _write(path, data) -> str:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return str(path)


def _dialogue_with(value_text: str) -> str:
    """One valid dialogue record whose first user_state.trust is `value_text` (raw JSON)."""
    record = json.loads(json.dumps(HAND[0]))
    turn = next(t for t in record["turns"] if t.get("user_state"))
    turn["user_state"]["trust"] = "@@"
    return json.dumps(record).replace('"@@"', value_text) + "\n"


def _profile_line(**changes) -> str:
    from sead_ray.scenario.scenario import load_scenario
    behavior = load_scenario(SCENARIO).behaviors[0].text
    record = {"cooperation": 2, "emotion": 1, "trust": 3, "behaviors": [behavior], **changes}
    return json.dumps(record) + "\n"


def _huge_scenario(tmp) -> str:
    """10^12 states. The rules still name the old dimensions: should the size check ever go, loading fails
    on them (a wrong message, so the case fails) instead of enumerating the grid until memory runs out."""
    tree = _scenario_tree()
    tree["state_schema"] = [{"name": f"d{i}", "levels": [f"level {j}" for j in range(10)]} for i in range(12)]
    return _write(tmp / "huge.yaml", yaml.safe_dump(tree))


def _run_dir(tmp, curriculum: str) -> str:
    from sead_ray.core.config import dump_config, load_config
    run = tmp / "run"
    (run / "curriculum").mkdir(parents=True)
    dump_config(load_config(EMBEDDED_CONFIG), run / "config.yaml")
    row = {"phase": "train", "iteration": 1, "n": 4, "successes": 1, "cr": 0.25}
    (run / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    (run / "curriculum" / "iter_0001.json").write_text(curriculum)
    return str(run)


# Each case: tmp_path -> (argv, words stderr must hold). "{tmp}" in a word is the test's tmp_path.
CASES = {
    # 1. non-UTF-8 files
    "config not utf-8": lambda t: (
        ["profiles", "sample", "--config", _write(t / "cfg.yaml", NOT_UTF8), "--n", 1, "--out", t / "p.jsonl"],
        ["cfg.yaml:1", "not UTF-8"]),
    "scenario not utf-8": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", f"scenario={_write(t / 'scen.yaml', NOT_UTF8)}",
         "--n", 1, "--out", t / "p.jsonl"],
        ["scen.yaml:1", "not UTF-8"]),
    "profiles not utf-8": lambda t: (
        ["eval", "--config", EMBEDDED_CONFIG, *AGENT, *RULE, "--profiles", _write(t / "p.jsonl", b"{}\n" + NOT_UTF8),
         "--out", t / "ev"],
        ["p.jsonl:2", "not UTF-8"]),
    "dialogues not utf-8": lambda t: (
        ["metrics", _write(t / "d.jsonl", NOT_UTF8), "--json"], ["d.jsonl:1", "not UTF-8"]),
    "metrics --config not utf-8": lambda t: (
        ["metrics", _write(t / "d.jsonl", ""), "--config", _write(t / "cfg.yaml", NOT_UTF8)], ["cfg.yaml:1", "not UTF-8"]),
    # 2. --set that is not KEY=YAML
    "--set value not yaml": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", "train.lr=[1,", "--n", 1, "--out", t / "p.jsonl"],
        ["--set train.lr=[1,", "not valid YAML"]),
    "--set without =": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", "trainlr", "--n", 1, "--out", t / "p.jsonl"],
        ["--set 'trainlr'", "KEY=VALUE"]),
    "--set empty key": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", "train.=3", "--n", 1, "--out", t / "p.jsonl"],
        ["--set 'train.=3'", "empty key"]),
    "--set integer of 5,000 digits": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", "seed=" + "9" * 5000, "--n", 1, "--out", t / "p"],
        ["--set seed=999", "cannot be read", "4300 digits"]),
    "config file integer of 5,000 digits": lambda t: (
        ["profiles", "sample", "--config", _write(t / "cfg.yaml", "seed: " + "9" * 5000 + "\n"), "--n", 1,
         "--out", t / "p"], ["cfg.yaml", "cannot be read"]),
    "metrics --set without --config": lambda t: (
        ["metrics", _write(t / "d.jsonl", ""), "--set", "seed=1"], ["--set", "no --config"]),
    "profiles --n huge with no N_max": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", "curriculum.mode=off", "--n", 10**8,
         "--out", t / "p"], ["100,000,000 profiles", "1,000,000"]),
    "config file not yaml": lambda t: (
        ["profiles", "sample", "--config", _write(t / "cfg.yaml", "train:\n  lr: [1,\n"), "--n", 1, "--out", t / "p"],
        ["cfg.yaml", "not valid YAML at line"]),
    # 3. NaN / inf in config numbers
    "nan lr": lambda t: (
        ["eval", "--config", EMBEDDED_CONFIG, *AGENT, "--set", "train.lr=.nan", "--n", 1],
        ["train.lr", "finite", "embedded.yaml"]),
    "inf clip_eps": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "train.clip_eps=.inf", "--out", t / "run"],
        ["train.clip_eps", "finite"]),
    "nan unbounded success_reward": lambda t: (
        ["compare", "--config", EMBEDDED_CONFIG, "--agents", "tiny:llama-h64", "--set", "train.success_reward=.nan",
         "--n", 1, "--out", t / "cmp"],
        ["train.success_reward", "finite"]),
    "nan in config file": lambda t: (
        ["profiles", "sample", "--config", _write(t / "cfg.yaml", "train:\n  kl_coef: .nan\n"), "--n", 1,
         "--out", t / "p.jsonl"],
        ["cfg.yaml", "train.kl_coef", "finite"]),
    "-inf as string": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", "train.entropy_coef=-inf", "--n", 1,
         "--out", t / "p.jsonl"],
        ["train.entropy_coef", "finite"]),
    # 4. negative seeds
    "--set seed=-1": lambda t: (
        ["eval", "--config", EMBEDDED_CONFIG, *AGENT, "--set", "seed=-1", "--n", 1], ["seed = -1", "out of range"]),
    "profiles --seed -1": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 1, "--seed", -1, "--out", t / "p.jsonl"],
        ["argument --seed", "-1"]),
    "eval --seed -1": lambda t: (
        ["eval", "--config", EMBEDDED_CONFIG, *AGENT, "--n", 1, "--seed", -1], ["argument --seed"]),
    "simcheck --seed -1": lambda t: (
        ["simcheck", "--config", EMBEDDED_CONFIG, *RULE, "--n", 1, "--seed", -1, "--out", t / "sc"],
        ["argument --seed"]),
    "compare --seed -1": lambda t: (
        ["compare", "--config", EMBEDDED_CONFIG, "--agents", "tiny:llama-h64", "--n", 1, "--seed", -1, "--out", t / "c"],
        ["argument --seed"]),
    # 5. an --out that cannot be written
    "profiles --out is a folder": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 1, "--out", t], ["--out {tmp}", "is a folder"]),
    "profiles --out below a file": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 1, "--out", t / _write(t / "f", "x") / "p.jsonl"],
        ["--out {tmp}/f/p.jsonl", "is a file, not a folder"]),
    "eval --out is a file": lambda t: (
        ["eval", "--config", EMBEDDED_CONFIG, *AGENT, *RULE, "--n", 1, "--out", _write(t / "f", "x")],
        ["--out {tmp}/f", "existing file"]),
    "simcheck --out is a file": lambda t: (
        ["simcheck", "--config", EMBEDDED_CONFIG, *RULE, "--n", 1, "--out", _write(t / "f", "x")],
        ["--out {tmp}/f", "existing file"]),
    "compare --out is a file": lambda t: (
        ["compare", "--config", EMBEDDED_CONFIG, "--agents", "tiny:llama-h64", "--n", 1, "--out", _write(t / "f", "x")],
        ["--out {tmp}/f", "existing file"]),
    "train --out is a file": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--out", _write(t / "f", "x")], ["--out {tmp}/f", "existing file"]),
    "train --out below a file": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--out", t / _write(t / "f", "x") / "run"],
        ["--out {tmp}/f/run", "is a file, not a folder"]),
    # 6. report on a broken curriculum file
    "report broken curriculum json": lambda t: (
        ["report", _run_dir(t, '{"states": {')], ["iter_0001.json:1", "not valid JSON"]),
    "report curriculum of another grid": lambda t: (
        ["report", _run_dir(t, json.dumps({"states": {"9-9-9-9": {"attempts": 1, "successes": 0}}}))],
        ["iter_0001.json", "states.9-9-9-9"]),
    # 8. --n < 1
    "profiles --n 0": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 0, "--out", t / "p.jsonl"], ["argument --n", "0"]),
    "eval --n 0": lambda t: (["eval", "--config", EMBEDDED_CONFIG, *AGENT, "--n", 0], ["argument --n"]),
    "simcheck --n -2": lambda t: (
        ["simcheck", "--config", EMBEDDED_CONFIG, *RULE, "--n", -2, "--out", t / "sc"], ["argument --n", "-2"]),
    "compare --n 0": lambda t: (
        ["compare", "--config", EMBEDDED_CONFIG, "--agents", "tiny:llama-h64", "--n", 0, "--out", t / "c"],
        ["argument --n"]),
    # 9. NaN / inf in a dialogues file
    "dialogues NaN": lambda t: (
        ["metrics", _write(t / "d.jsonl", json.dumps(HAND[1]) + "\n" + _dialogue_with("NaN")), "--json"],
        ["d.jsonl:2", "NaN"]),
    "dialogues Infinity": lambda t: (
        ["metrics", _write(t / "d.jsonl", _dialogue_with("-Infinity")), "--json"], ["d.jsonl:1", "Infinity"]),
    "dialogues 1e999": lambda t: (
        ["metrics", _write(t / "d.jsonl", _dialogue_with("1e999"))], ["d.jsonl:1", "trust", "finite"]),
    # 10. a state grid too large to enumerate
    "huge state grid": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", f"scenario={_huge_scenario(t)}", "--n", 1,
         "--out", t / "p.jsonl"],
        ["huge.yaml", "state_schema", "1,000,000,000,000"]),
    # a rule_user opening the rule user does not hear as one (checked at config load, whatever user.backend)
    "scenario opening heard as nothing": lambda t: (
        ["profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", f"scenario={_scenario_with(t, opening='Hello.')}",
         "--set", "user.backend=vllm", "--n", 1, "--out", t / "p.jsonl"],
        ["scen.yaml", "rule_user.opening must say who calls"]),
    # profiles files eval replays
    "profiles with unknown behavior": lambda t: (
        ["eval", "--config", EMBEDDED_CONFIG, *AGENT, *RULE, "--out", t / "ev",
         "--profiles", _write(t / "p.jsonl", _profile_line() + _profile_line(behaviors=["juggles chainsaws"]))],
        ["p.jsonl:2", "juggles chainsaws", "not in the library"]),
    "profiles with NaN": lambda t: (
        ["eval", "--config", EMBEDDED_CONFIG, *AGENT, *RULE, "--out", t / "ev",
         "--profiles", _write(t / "p.jsonl", _profile_line().replace("}", ', "note": NaN}'))],
        ["p.jsonl:1", "NaN"]),
    # serve, judge, ablate, monitor, endpoints
    "serve without a key": lambda t: (
        ["serve", "tiny:llama-h64", "--scenario", SCENARIO], ["SEAD_RAY_API_KEY", "sead-ray serve"]),
    "serve replica bounds reversed": lambda t: (
        ["serve", "tiny:llama-h64", "--scenario", SCENARIO, "--min-replicas", 3, "--max-replicas", 1],
        ["--min-replicas 3", "--max-replicas 1"]),
    "endpoint agent without a key": lambda t: (
        ["eval", "--config", EMBEDDED_CONFIG, *RULE, "--set", "endpoint.api_key_env=SEAD_TEST_NO_SUCH_KEY",
         "--agent", "openai:m@http://127.0.0.1:9/v1", "--n", 1, "--out", t / "ev"],
        ["SEAD_TEST_NO_SUCH_KEY"]),
    "judge a missing file": lambda t: (
        ["judge", t / "none.jsonl", "--config", EMBEDDED_CONFIG, "--judge", "tiny:llama-h64"], ["none.jsonl"]),
    "negative price": lambda t: (
        ["compare", "--config", EMBEDDED_CONFIG, "--set", "cost.usd_per_mtok_in={m: -1}", "--agents", "tiny:llama-h64",
         "--n", 1, "--out", t / "cmp"], ["cost.usd_per_mtok_in"]),
    "ablate unknown variant": lambda t: (
        ["ablate", "--config", EMBEDDED_CONFIG, "--variants", "full,fancy", "--n", 1, "--out", t / "ab"],
        ["--variants", "fancy"]),
    # every extension point refuses a name nothing registered, listing the known ones
    "unknown reward": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "train.reward=nope", "--out", t / "run"],
        ["train.reward = 'nope'", "known: milestones, outcome"]),
    "unknown user simulator": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "user.backend=nope", "--out", t / "run"],
        ["user.backend = 'nope'", "known: rule, vllm"]),
    "unknown weight transport": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "weight_sync.transport=nope", "--out", t / "run"],
        ["weight_sync.transport = 'nope'", "known: gloo, nccl, object_store, shm"]),
    "unknown advantage estimator": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "train.advantage_mode=nope", "--out", t / "run"],
        ["train.advantage_mode = 'nope'", "known: batch_mean, group_mean, group_norm"]),
    "unknown ear of the rule user": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "user.rule.ear=nope", "--out", t / "run"],
        ["user.rule.ear = 'nope'", "known: lexicon, semantic"]),
    "ear lines that do not match the scenario": lambda t: (
        ["simcheck", "--config", EMBEDDED_CONFIG, "--set", "scenario=" + _scenario_beside(
            t, "facts: [{paraphrase: [a.], terse: [a.], lies: [b.]}]"), "--adversarial", "--n", 1, "--out", t / "sc"],
        ["ear_lines.yaml", "one entry per agent fact"]),
    "a reward that reads an agenda the simulator does not report": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "train.reward=milestones", "--set", "user.backend=vllm",
         "--out", t / "run"], ["train.reward = milestones", "user.backend = vllm does not report", "(rule)"]),
    "trained rule simulator": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "user.train=true", "--out", t / "run"],
        ["user.train", "user.backend = vllm"]),
    "trained simulator colocated": lambda t: (
        ["train", "--config", EMBEDDED_CONFIG, "--set", "user.train=true", "--set", "user.backend=vllm",
         "--set", "placement.colocate=true", "--out", t / "run"], ["user.train", "placement.colocate = false"]),
    "ablate bad seeds": lambda t: (
        ["ablate", "--config", EMBEDDED_CONFIG, "--seeds", "1,x", "--n", 1, "--out", t / "ab"], ["--seeds"]),
    "monitor bad interval": lambda t: (
        ["monitor", "--dir", t / "mon", "--scrape-interval", "fast"], ["--scrape-interval", "fast"]),
}


def _scenario_beside(tmp, ear_lines: str) -> str:
    """A copy of the default scenario with the given ear lines beside it."""
    import shutil
    scenario = tmp / "scenario.yaml"
    shutil.copy(SCENARIO, scenario)
    (tmp / "scenario.ear_lines.yaml").write_text(
        ear_lines + "\n" + "\n".join(f"{k}: [x.]" for k in ("identity", "offer", "ask", "pressure", "credentials",
                                                              "payment", "reassurance", "small_talk", "clean")))
    return str(scenario)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_exit_2_with_a_one_line_message(case, tmp_path, capsys):
    argv, needles = CASES[case](tmp_path)
    rc, err = sead(capsys, *argv)
    assert "Traceback" not in err, err
    assert rc == 2, (rc, err)
    message = [line for line in err.splitlines() if "error:" in line]
    assert len(message) == 1, err          # one line says what is wrong ...
    for needle in needles:                 # ... and names the file, line, key or flag
        assert needle.format(tmp=tmp_path) in message[0], (needle, err)


def test_no_case_left_files_behind_on_refusal(tmp_path, capsys):
    out = tmp_path / "p.jsonl"
    assert sead(capsys, "profiles", "sample", "--config", EMBEDDED_CONFIG, "--n", 0, "--out", out)[0] == 2
    assert not out.exists()


# --------------------------------------------------------------------------- what must keep working

def test_curriculum_mode_off_loads_from_yaml_and_set(tmp_path, capsys):
    from sead_ray.core.config import dump_config, load_config
    cfg_file = tmp_path / "off.yaml"
    cfg_file.write_text(EMBEDDED_CONFIG.read_text().replace("mode: paper", "mode: off")
                        .replace("scenario: scenarios/", f"scenario: {SCENARIO.parent}/"))
    assert "mode: off\n" in cfg_file.read_text()
    assert load_config(cfg_file).curriculum.mode == "off"
    assert load_config(EMBEDDED_CONFIG, ["curriculum.mode=off"]).curriculum.mode == "off"
    # the resolved config written into a run directory reads back as "off" too
    dump_config(load_config(cfg_file), tmp_path / "again.yaml")
    assert load_config(tmp_path / "again.yaml").curriculum.mode == "off"
    # and the CLI samples with it
    out = tmp_path / "p.jsonl"
    rc, err = sead(capsys, "profiles", "sample", "--config", cfg_file, "--n", 3, "--out", out)
    assert rc == 0, err
    assert len(out.read_text().splitlines()) == 3
    rc, err = sead(capsys, "profiles", "sample", "--config", EMBEDDED_CONFIG, "--set", "curriculum.mode=off",
                   "--n", 2, "--out", out)
    assert rc == 0, err


def test_other_booleans_are_still_not_modes():
    from sead_ray.core.config import ConfigError, load_config
    with pytest.raises(ConfigError, match="curriculum.mode = True"):
        load_config(EMBEDDED_CONFIG, ["curriculum.mode=on"])


def test_finite_numbers_and_zero_seed_still_load():
    from sead_ray.core.config import load_config
    cfg = load_config(EMBEDDED_CONFIG, ["train.lr=1e-6", "seed=0", "train.success_reward=-2.5"])
    assert (cfg.train.lr, cfg.seed, cfg.train.success_reward) == (1e-6, 0, -2.5)


def test_profiles_that_break_rules_are_replayed_with_a_warning(tmp_path, scenario, caplog):
    """A profile against the consistency rules is a warning, not an error: users replay such sets on purpose."""
    from sead_ray.scenario.profiles import Profile, read_profiles
    broken = next((s, b) for s in scenario.schema.grid() for b in scenario.behaviors
                  if scenario.violated_rules(s, (b,)))
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(Profile(broken[0], (broken[1].text,)).to_json(scenario.schema)) + "\n")
    with caplog.at_level(logging.WARNING, logger="sead_ray.scenario.profiles"):
        profiles = read_profiles(path, scenario)
    assert len(profiles) == 1
    assert any("p.jsonl:1" in r.getMessage() and "violates rule" in r.getMessage() for r in caplog.records)


def test_start_depths_are_checked_where_they_are_given():
    from sead_ray.cli.arg_types import start_depth
    from tests.conftest import tiny_config
    assert start_depth("cold") == "cold" and start_depth("2") == 2
    for bad in ("-1", "deep"):
        with pytest.raises(argparse.ArgumentTypeError, match="depth"):
            start_depth(bad)
    for overrides, key in ((["curriculum.depth=reverse", "curriculum.depths=[0, 0]"], "curriculum.depths"),
                           (["curriculum.depths=[-1]"], "curriculum.depths"),
                           (["train.eval_depths=[]"], "train.eval_depths"),
                           (["train.eval_depths=[cold, -2]"], "train.eval_depths"),
                           (["curriculum.depth=backwards"], "curriculum.depth")):
        with pytest.raises(ConfigError, match=key):
            tiny_config(*overrides)


def test_eval_and_compare_play_every_call_from_the_depth_asked(tmp_path):
    from argparse import Namespace

    from sead_ray.runs.inputs import UsageError, evaluation_profiles, load, write_profiles
    # a training config's depths never leak into an evaluation
    cfg, scenario = load(str(EMBEDDED_CONFIG), ["curriculum.depth=reverse"])
    args = Namespace(seed=3, profiles=None, n=4, user_sets=None, depth=None)
    cold, _ = evaluation_profiles(args, cfg, scenario)
    assert [p.start_depth for p in cold] == [None] * 4
    deep, source = evaluation_profiles(Namespace(**{**vars(args), "depth": 1}), cfg, scenario)
    assert [p.start_depth for p in deep] == [1] * 4 and [p.state for p in deep] == [p.state for p in cold]
    assert "1 turn(s) before" in source
    path = tmp_path / "p.jsonl"
    write_profiles(path, deep, scenario)
    from_file, _ = evaluation_profiles(Namespace(**{**vars(args), "profiles": str(path), "n": None}), cfg, scenario)
    assert [p.start_depth for p in from_file] == [1] * 4
    path.write_text(path.read_text().replace('"start_depth": 1', '"start_depth": -1', 1))
    with pytest.raises(UsageError, match="start_depth"):
        evaluation_profiles(Namespace(**{**vars(args), "profiles": str(path), "n": None}), cfg, scenario)


def test_a_scenario_path_written_from_the_working_folder_is_named_as_the_config_reads_it(monkeypatch, capsys):
    """`--set scenario=...` is read from the config's folder: a path that only makes sense from where the command
    runs gets the path to write instead."""
    monkeypatch.chdir(EMBEDDED_CONFIG.parent.parent)
    rc, err = sead(capsys, "train", "--config", EMBEDDED_CONFIG, "--set",
                   "scenario=configs/scenarios/charity_donation.yaml", "--out", "/nonexistent/run")
    assert rc == 2 and "Traceback" not in err
    assert "the file you mean is scenario=scenarios/charity_donation.yaml" in err
