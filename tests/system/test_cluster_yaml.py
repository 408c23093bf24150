"""cluster.yaml passes the checks `ray up` runs before it contacts the cloud, and its nodes hold the
paper config's placement."""
import pytest
import yaml

from sead_ray.core.config import load_config
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
    rollout = cfg.placement.user.node_resource
    assert rollout and cfg.user.engines == "auto"
    trainer_node = types["trainer_8x_a100"]["resources"]
    need = (cfg.trainer.num_workers * cfg.placement.trainer.gpus + cfg.placement.agent.gpus
            + trainer_node[rollout] * cfg.placement.user.gpus)
    assert need <= trainer_node["GPU"]
    cpus = (cfg.trainer.num_workers * cfg.placement.trainer.cpus + cfg.placement.agent.cpus
            + trainer_node[rollout] * cfg.placement.user.cpus)
    assert cpus <= trainer_node["CPU"]
    scale_out = types["rollout_8x_a100"]["resources"]
    assert scale_out[rollout] * cfg.placement.user.gpus <= scale_out["GPU"]
    assert scale_out[rollout] * cfg.placement.user.cpus <= scale_out["CPU"]


def test_setup_boots_with_the_pinned_stack_a_shared_run_dir_and_a_private_dashboard():
    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    commands = " ".join(raw["initialization_commands"] + raw["setup_commands"])
    assert "hf download" in commands and "huggingface-cli" not in commands   # huggingface_hub >= 1.0 has `hf`
    # always run: `hf download` resumes a partial download and skips complete files; a guard on config.json
    # would never retry weights that did not all arrive
    downloads = [c for c in raw["setup_commands"] if "hf download" in c]
    assert downloads and all(c.startswith("hf download ") and "||" not in c and "test -e" not in c for c in downloads)
    assert "/models/Qwen2.5-14B-Instruct" in " ".join(downloads)
    # the NFS client on the host before mounting EFS (not in every AMI)
    init = raw["initialization_commands"]
    nfs_client = next(i for i, c in enumerate(init) if "nfs-common" in c)
    assert nfs_client < next(i for i, c in enumerate(init) if "mount -t nfs4" in c)
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
    from sead_ray.cli.args import build_parser
    args = build_parser().parse_args(monitor.split("nohup sead-ray ", 1)[1].split(">")[0].split())
    assert (args.port, args.grafana_port) == (9090, 3000)


def test_every_node_gets_the_token_that_ray_start_needs():
    """Ray 2.60's `ray start` with RAY_AUTH_MODE=token reads the token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, else
    ~/.ray/auth_token) but never creates one (only ray.init does): the file is shipped to every node, and a node
    without it stops with a message saying how to make one instead of Ray's error."""
    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert raw["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        commands = raw[key]
        start = next(i for i, c in enumerate(commands) if "ray start" in c)
        assert "RAY_AUTH_MODE=token" in commands[start]
        guard = next(i for i, c in enumerate(commands) if "test -s ~/.ray/auth_token" in c)
        assert guard < start and "ray get-auth-token --generate" in commands[guard]
    # the token mode the installed Ray reads, and the file it reads it from (what the mount above provides)
    import inspect

    from ray._private.authentication import authentication_token_setup as setup
    assert setup.AUTH_MODE_ENV_VAR == "RAY_AUTH_MODE"
    assert str(setup._get_default_token_path()).endswith(".ray/auth_token")
    # `ray start` asks for an existing token (create_token_if_missing=False), ray.init may create one
    from ray.scripts import scripts
    start_source = inspect.getsource(scripts.start.callback)
    assert "ensure_token_if_auth_enabled(system_config, create_token_if_missing=False)" in start_source


def test_nodes_are_a100_80gb_on_a_pinned_gpu_ami():
    config = _cluster()
    raw = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    dlami = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/"
    for name, node in config["available_node_types"].items():
        # an ImageId on every node: without one Ray falls back to its 2021 Deep Learning AMI (old driver)
        assert node["node_config"]["ImageId"].startswith(dlami), name
    for name in ("trainer_8x_a100", "rollout_8x_a100"):
        # p4de: 8 x A100 80 GB; p4d's are 40 GB, on which the paper config does not fit by its plan
        assert raw["available_node_types"][name]["node_config"]["InstanceType"] == "p4de.24xlarge"
    cfg = load_config(ROOT / "configs" / "sead_qwen2.5_14b_8xa100.yaml")
    assert cfg.placement.gpu_memory_gib == pytest.approx(79.2)   # what the plan checks: an 80 GB A100
