import pytest

from sead_ray.config import ConfigError, SeadConfig, config_to_dict, dump_config, load_config
from tests.conftest import EMBEDDED_CONFIG, ROOT


def test_embedded_and_paper_configs_load():
    cfg = load_config(EMBEDDED_CONFIG)
    assert cfg.models.agent == "embedded:smollm2-135m-instruct"
    assert cfg.dialogue.max_turns == 6 and cfg.dialogue.agent_train.max_tokens == 64
    # the demo's learning setting: the scenario's rule simulator on soft users, GRPO groups of 4
    assert (cfg.user_sim.backend, cfg.curriculum.user_set, cfg.train.rollouts_per_profile,
            cfg.train.advantage_mode) == ("rule", "soft", 4, "group_mean")
    assert cfg.resolve_path(cfg.scenario).exists()
    paper = load_config(ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml")
    assert (paper.train.batch_size, paper.train.lr, paper.dialogue.max_turns, paper.curriculum.n_max) == (60, 1e-6, 15, 200)
    assert paper.user_sim.engines == "auto"
    assert paper.placement.agent_policy.gpus == 1


def test_overrides_are_typed():
    cfg = load_config(EMBEDDED_CONFIG, ["train.batch_size=4", "curriculum.mode=uniform", "train.lr=3e-6",
                                        "user_sim.backend=rule", "seed=11"])
    assert cfg.train.batch_size == 4 and cfg.curriculum.mode == "uniform"
    assert cfg.train.lr == pytest.approx(3e-6) and cfg.user_sim.backend == "rule" and cfg.seed == 11


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
    ("user_sim.engines=many", "user_sim.engines"),
    ("curriculum.hard_below=0.9", "must not exceed curriculum.easy_above"),
    ("engine.block_size=48", "engine.block_size must be a multiple of 32 with engines on CPU"),
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
