import pytest

from sead_ray.core.config import ConfigError, SeadConfig, config_to_dict, dump_config, load_config
from tests.conftest import EMBEDDED_CONFIG, ROOT


def test_embedded_and_paper_configs_load():
    cfg = load_config(EMBEDDED_CONFIG)
    assert cfg.models.agent == "embedded:smollm2-135m-instruct"
    assert cfg.dialogue.max_turns == 6 and cfg.dialogue.agent_train.max_tokens == 64
    # the demo's learning setting: the scenario's rule simulator on soft and hard users, GRPO groups of 4
    assert (cfg.user.backend, cfg.curriculum.user_set, cfg.train.rollouts_per_profile,
            cfg.train.advantage_mode) == ("rule", "soft,hard", 4, "group_mean")
    # learning from a weak start (issue 36): the rehearsal (its decision tokens weighed as the others), the reverse
    # curriculum, the semantic ear; the run's own test (issue 51): 64 soft and 64 hard held-out owners, cold calls
    assert (cfg.train.warm_start, cfg.train.warm_start_decision_weight, cfg.curriculum.depth, cfg.curriculum.depths,
            cfg.user.rule.ear) == ("sop_rehearsal", 1, "reverse", (0, 1), "semantic")
    assert (cfg.train.eval_user_sets, cfg.train.eval_profiles, cfg.train.eval_depths) == (("soft", "hard"), 64, ("cold",))
    assert cfg.resolve_path(cfg.scenario).exists()
    paper = load_config(ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml")
    assert (paper.train.batch_size, paper.train.lr, paper.dialogue.max_turns, paper.curriculum.n_max) == (60, 1e-6, 15, 200)
    assert paper.user.engines == "auto"
    assert paper.placement.agent.gpus == 1


def test_gpu_first_run_settings():
    """Issue 37: vLLM's log level and the trainer group's start timeout are config keys; the GPU configs wait 1800 s
    for the trainer group and the smoke run shows vLLM's INFO lines (its KV cache and CUDA graphs' memory)."""
    cfg = load_config(EMBEDDED_CONFIG)
    assert (cfg.engine.log_level, cfg.trainer.start_timeout_s) == ("ERROR", 900.0)
    for smoke_config in ("smoke_qwen2.5_0.5b_2gpu.yaml", "smoke_qwen2.5_0.5b_4gpu.yaml"):
        smoke = load_config(ROOT / "configs" / smoke_config)
        assert (smoke.engine.log_level, smoke.trainer.start_timeout_s) == ("INFO", 1800.0)
    assert load_config(ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml").trainer.start_timeout_s == 1800.0


def test_overrides_are_typed():
    cfg = load_config(EMBEDDED_CONFIG, ["train.batch_size=4", "curriculum.mode=uniform", "train.lr=3e-6",
                                        "user.backend=rule", "seed=11"])
    assert cfg.train.batch_size == 4 and cfg.curriculum.mode == "uniform"
    assert cfg.train.lr == pytest.approx(3e-6) and cfg.user.backend == "rule" and cfg.seed == 11


def test_defaults_without_file():
    cfg = load_config(None)
    assert isinstance(cfg, SeadConfig) and cfg.train.batch_size >= 1


@pytest.mark.parametrize("override, needle", [
    ("train.bogus=1", "unknown key 'train.bogus'"),
    ("train.batch_size=abc", "train.batch_size must be an integer"),
    ("train.batch_size=0", "train.batch_size = 0 is out of range"),
    ("curriculum.mode=sideways", "curriculum.mode = 'sideways' is not one of"),
    ("dialogue.max_turns=2.5", "dialogue.max_turns must be an integer"),
    ("curriculum.profile_sampling=maybe", "curriculum.profile_sampling must be true or false"),
    ("user.engines=many", "user.engines"),
    ("curriculum.hard_below=0.9", "must not exceed curriculum.easy_above"),
    ("engine.block_size=48", "engine.block_size must be a multiple of 32 with engines on CPU"),
    ("engine.log_level=LOUD", "engine.log_level = 'LOUD' is not one of"),
    ("trainer.start_timeout_s=5", "trainer.start_timeout_s = 5.0 is out of range"),
    ("train=3", "train must be a mapping"),
    ("novalue", "expected KEY=VALUE"),
])
def test_bad_overrides_name_the_key(override, needle):
    with pytest.raises(ConfigError) as exc:
        load_config(EMBEDDED_CONFIG, [override])
    assert needle in str(exc.value)
    if "KEY=VALUE" not in needle:
        assert "embedded.yaml" in str(exc.value)


def test_bad_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  batch_size: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(bad)
    bad.write_text("dialogue:\n  agent_eval:\n    temperature: -1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.*dialogue.agent_eval.temperature = -1"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(EMBEDDED_CONFIG, ["train.batch_size=5"])
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    again = load_config(out)
    assert config_to_dict(again) == config_to_dict(cfg)


def test_the_old_spellings_of_the_roles_still_load_with_a_warning(tmp_path, caplog):
    """One word per role (agent, user) across config, metrics and checkpoints; configs written before keep
    working: `user_sim` is `user`, `placement.agent_policy` / `placement.user_sim` are `placement.agent` /
    `placement.user`, in files and in --set."""
    import logging
    old = tmp_path / "old.yaml"
    old.write_text(EMBEDDED_CONFIG.read_text().replace("scenario: scenarios/", f"scenario: {ROOT}/scenarios/")
                   .replace("\nuser:\n", "\nuser_sim:\n").replace("  agent: {cpus", "  agent_policy: {cpus"))
    assert "user_sim:" in old.read_text() and "agent_policy:" in old.read_text()
    with caplog.at_level(logging.WARNING, logger="sead_ray.core.config"):
        cfg = load_config(old, ["user_sim.engines=2", "placement.user_sim.cpus=0.25"])
    assert (cfg.user.backend, cfg.user.engines, cfg.placement.user.cpus, cfg.placement.agent.cpus) == ("rule", 2, 0.25, 0.5)
    said = caplog.text
    assert "user_sim is now spelled user" in said and "placement.agent_policy is now spelled placement.agent" in said
    assert "placement.user_sim is now spelled placement.user" in said
    both = tmp_path / "both.yaml"
    both.write_text(old.read_text() + "\nuser:\n  engines: 1\n")
    with pytest.raises(ConfigError, match="both user_sim and user are given"):
        load_config(both)
