"""cluster.yaml passes the checks `ray up` runs before it contacts the cloud, and its nodes hold the
paper config's placement."""
import yaml

from sead_ray.config import load_config
from tests.conftest import ROOT


def _cluster():
    from ray.autoscaler._private.util import prepare_config, validate_config
    config = prepare_config(yaml.safe_load((ROOT / "cluster.yaml").read_text()))
    validate_config(config)   # Ray's own schema (ray-schema.json) and consistency checks
    return config


def test_cluster_yaml_is_a_valid_ray_cluster_config():
    config = _cluster()
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    assert sum(t.get("min_workers", 0) for t in types.values()) <= config["max_workers"]


def test_paper_config_fits_the_cluster_nodes():
    cfg = load_config(ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml")
    types = _cluster()["available_node_types"]
    rollout = cfg.placement.user_sim.node_resource
    assert rollout and cfg.user_sim.engines == "auto"
    trainer_node = types["trainer_8x_a100"]["resources"]
    need = (cfg.trainer.num_workers * cfg.placement.trainer.gpus + cfg.placement.agent_policy.gpus
            + trainer_node[rollout] * cfg.placement.user_sim.gpus)
    assert need <= trainer_node["GPU"]
    cpus = (cfg.trainer.num_workers * cfg.placement.trainer.cpus + cfg.placement.agent_policy.cpus
            + trainer_node[rollout] * cfg.placement.user_sim.cpus)
    assert cpus <= trainer_node["CPU"]
    scale_out = types["rollout_8x_a100"]["resources"]
    assert scale_out[rollout] * cfg.placement.user_sim.gpus <= scale_out["GPU"]
    assert scale_out[rollout] * cfg.placement.user_sim.cpus <= scale_out["CPU"]


def test_setup_boots_with_the_pinned_stack_a_shared_run_dir_and_a_private_dashboard():
    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    commands = " ".join(raw["initialization_commands"] + raw["setup_commands"])
    assert "hf download" in commands and "huggingface-cli" not in commands   # huggingface_hub >= 1.0 has `hf`
    assert "mount -t nfs4" in commands and "/shared" in commands and "-v /shared:/shared" in raw["docker"]["run_options"]
    pinned_ray = next(d for d in (ROOT / "pyproject.toml").read_text().split('"') if d.startswith("ray[")).split("==")[1]
    assert raw["docker"]["image"].startswith(f"rayproject/ray:{pinned_ray}-")
    head = " ".join(raw["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head and "0.0.0.0" not in head and "RAY_AUTH_MODE=token" in head


def test_the_head_runs_prometheus_and_grafana_on_localhost_for_the_ray_dashboard():
    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    setup = " ".join(raw["head_setup_commands"])
    assert "apt-get install" in setup and "prometheus" in setup and "grafana" in setup
    head = " ".join(raw["head_start_ray_commands"])
    monitor = next(c for c in raw["head_start_ray_commands"] if "sead-ray monitor" in c)
    assert raw["head_start_ray_commands"].index(monitor) > next(i for i, c in enumerate(raw["head_start_ray_commands"])
                                                                if "ray start --head" in c)
    assert "--grafana ~/grafana/bin/grafana" in monitor and "--port" not in monitor   # the Ray dashboard's defaults
    for env in ("RAY_GRAFANA_HOST=http://127.0.0.1:3000", "RAY_PROMETHEUS_HOST=http://127.0.0.1:9090"):
        assert env in head
    from sead_ray.cli_args import build_parser
    args = build_parser().parse_args(monitor.split("nohup sead-ray ", 1)[1].split(">")[0].split())
    assert (args.port, args.grafana_port) == (9090, 3000)
