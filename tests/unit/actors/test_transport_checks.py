"""A weight transport that cannot work where the config puts the roles is refused before any engine
starts: by the config alone (exit 2 at load), or by the cluster's nodes (exit 2 at start)."""
import subprocess
import sys

import pytest

from actors.weights.cluster_checks import transport_placement_problem
from tests.conftest import EMBEDDED_CONFIG, ROOT, tiny_config


def _node(ip, cpus, gpus=0, **custom):
    return {"NodeID": ip.replace(".", "") * 4, "NodeManagerAddress": ip, "Resources": {"CPU": cpus, "GPU": gpus, **custom}}


@pytest.mark.parametrize("overrides, message", [
    (["weight_sync.transport=nccl"], "needs CUDA on both ends"),
    (["placement.colocate=true", "placement.trainer.gpus=1", "placement.agent.gpus=1",
      "weight_sync.transport=nccl"], "placement.colocate = true is not supported on GPUs"),
    (["weight_sync.transport=ipc"],
     "weight_sync.transport = 'ipc' names no registered weight transport; known: gloo, nccl, object_store, shm"),
    (["agent.tensor_parallel_size=2"], "needs placement.agent.gpus = 2"),
])
def test_the_config_alone_refuses_impossible_transports(overrides, message):
    cmd = [sys.executable, "-m", "sead_ray.cli.main", "train", "--config", str(EMBEDDED_CONFIG), "--out", "/nonexistent"]
    for o in overrides:
        cmd += ["--set", o]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "Ray cluster" not in proc.stderr          # refused before Ray was even started


def test_shm_is_refused_when_trainer_or_agent_can_land_on_another_node():
    cfg = tiny_config("weight_sync.transport=shm")
    one_node = [_node("10.0.0.1", 8)]
    assert transport_placement_problem(cfg, one_node) is None
    problem = transport_placement_problem(cfg, one_node + [_node("10.0.0.2", 4, rollout=1)])
    assert problem and "trainer and agent can land on 2 nodes" in problem and "10.0.0.2" in problem
    # a node too small for either role does not count; gloo and object_store work across nodes
    assert transport_placement_problem(cfg, one_node + [_node("10.0.0.3", 0.1)]) is None
    for transport in ("gloo", "object_store"):
        assert transport_placement_problem(tiny_config(f"weight_sync.transport={transport}"),
                                           one_node + [_node("10.0.0.2", 4)]) is None


def test_shm_is_refused_when_the_weights_do_not_fit_the_nodes_shared_memory():
    """The 14B paper model in bf16 (29.5 GB a version) against a container's /dev/shm; the size from the
    model's shape, the free space as measured on the node (here given per node id)."""
    from actors.weights.cluster_checks import trained_weight_bytes
    cfg = tiny_config("weight_sync.transport=shm", "models.dtype=bfloat16")
    paper = trained_weight_bytes(cfg, "Qwen2.5-14B-Instruct")
    assert 29e9 < paper < 30e9
    node = _node("10.0.0.1", 8)
    problem = transport_placement_problem(cfg, [node], paper, lambda node_id: 20 * 2**30)
    assert problem and "27.5 GiB" in problem and "10.0.0.1" in problem and "20.0 GiB free" in problem
    assert transport_placement_problem(cfg, [node], paper, lambda node_id: 64 * 2**30) is None
    assert trained_weight_bytes(tiny_config("weight_sync.transport=gloo"), "Qwen2.5-14B-Instruct") == 0
    # the simulator's weights count too when it is trained
    urm = tiny_config("weight_sync.transport=shm", "models.dtype=bfloat16", "user.train=true", "user.backend=vllm",
                      "models.user=Qwen2.5-14B-Instruct")
    assert trained_weight_bytes(urm, "Qwen2.5-14B-Instruct") == 2 * paper


def test_gpu_transports_need_a_gpu_in_the_cluster():
    cfg = tiny_config("weight_sync.transport=nccl", "placement.trainer.gpus=1", "placement.agent.gpus=1")
    assert "no node of the cluster has one" in transport_placement_problem(cfg, [_node("10.0.0.1", 8)])
    assert transport_placement_problem(cfg, [_node("10.0.0.1", 8, gpus=8)]) is None


def test_engine_settings_follow_the_device_and_the_transport():
    from actors.engine_sizing import engine_spec_from_config
    cpu = tiny_config("weight_sync.transport=gloo")
    agent, user = engine_spec_from_config(cpu, "agent", "m", 0), engine_spec_from_config(cpu, "user", "m", 1)
    # CPU: eager, whole prefills (vLLM-CPU crashes on seeded chunked prefills); only the agent joins the transfer
    assert (agent.enforce_eager, agent.chunked_prefill, agent.weight_transfer_backend) == (True, False, "gloo")
    assert user.weight_transfer_backend == ""
    gpu = tiny_config("weight_sync.transport=nccl", "placement.trainer.gpus=1", "placement.agent.gpus=2",
                      "agent.tensor_parallel_size=2")
    spec = engine_spec_from_config(gpu, "agent", "m", 0)
    assert (spec.enforce_eager, spec.chunked_prefill, spec.tensor_parallel_size) == (False, True, 2)


def test_tensor_parallel_engines_get_arguments_vllm_accepts():
    """TP = 2: a pool engine runs its two workers as processes of its actor (one bundle of 2 GPUs, the `mp`
    executor); `serve` gives ray.serve.llm one one-GPU bundle per worker (vLLM's Ray executor)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    from actors.engine_sizing import engine_spec_from_config
    from actors.vllm_engine import engine_kwargs, pool_engine_kwargs
    from placement.groups import plan_placement, tensor_parallel_bundles
    cfg = tiny_config("placement.agent.gpus=2", "placement.agent.cpus=4", "agent.tensor_parallel_size=2",
                      "placement.trainer.gpus=1", "weight_sync.transport=nccl")
    spec = engine_spec_from_config(cfg, "agent", "m", 0)
    pool = pool_engine_kwargs(spec)
    assert (pool["tensor_parallel_size"], pool["distributed_executor_backend"]) == (2, "mp")
    assert plan_placement(cfg, {"agent": 1})["agent"].bundles == [{"CPU": 4.0, "GPU": 2.0}]
    args = AsyncEngineArgs(model="m", **pool)      # vLLM's own argument type takes them
    assert args.distributed_executor_backend == "mp" and args.tensor_parallel_size == 2
    assert "distributed_executor_backend" not in engine_kwargs(spec)     # serve: ray.serve.llm's Ray executor
    assert tensor_parallel_bundles(cfg.placement.agent, 2) == [{"CPU": 2.0, "GPU": 1.0}] * 2
    single = engine_spec_from_config(tiny_config(), "agent", "m", 0)
    assert "distributed_executor_backend" not in pool_engine_kwargs(single)
    assert tensor_parallel_bundles(tiny_config().placement.agent, 1) == [{"CPU": 0.5}]
    assert engine_spec_from_config(tiny_config(), "agent", "m", 0).weight_transfer_backend == ""   # shm


def test_weight_files_are_private_unguessable_and_never_left_half_written(monkeypatch):
    import os
    import stat

    import torch

    from actors.weights import files as weight_sync
    tensors = {"w": torch.ones(3)}
    a, b = (weight_sync.write_private_weights(tensors, "weights", 1) for _ in range(2))
    mine = f"sead-weights-{os.getpid()}-v1-"   # other runs on this machine write their own weight files
    try:
        assert a != b and os.path.basename(a).startswith(mine)       # same version, new names
        assert stat.S_IMODE(os.stat(a).st_mode) == 0o600              # only this user reads it
        from safetensors.torch import load_file
        assert torch.equal(load_file(a)["w"], tensors["w"])
    finally:
        weight_sync.discard(a), weight_sync.discard(b)

    def disk_full(tensors, path):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr("safetensors.torch.save_file", disk_full)
    with pytest.raises(OSError, match="No space left"):
        weight_sync.write_private_weights(tensors, "weights", 2)
    assert not [f for f in os.listdir(weight_sync.shm_dir()) if f.startswith(f"sead-weights-{os.getpid()}-v2-")]


def test_too_little_space_is_refused_before_writing(monkeypatch):
    import collections
    import os

    import torch

    from actors.weights import files as weight_sync
    monkeypatch.setattr("shutil.disk_usage", lambda d: collections.namedtuple("u", "total used free")(1, 1, 1000))
    with pytest.raises(OSError, match=r"weights v3 need \d+ MB in .*, 0 MB free"):
        weight_sync.write_private_weights({"w": torch.ones(1000)}, "weights", 3)
    assert not [f for f in os.listdir(weight_sync.shm_dir()) if f.startswith(f"sead-weights-{os.getpid()}-v3-")]


def test_stale_weight_files_of_dead_writers_are_swept(tmp_path):
    import os
    import subprocess

    from actors.weights import files as weight_sync
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = os.getppid()
    files = {name: tmp_path / name for name in (f"sead-weights-{dead.pid}-v3-abc.safetensors",
                                                 f"sead-recv-{dead.pid}-v3-def.safetensors",
                                                 f"sead-weights-{live}-v4-ghi.safetensors",
                                                 f"sead-weights-{os.getpid()}-v5-jkl.safetensors", "other.safetensors")}
    for path in files.values():
        path.write_text("x")
    removed = weight_sync.sweep_stale_weight_files(str(tmp_path))
    assert sorted(os.path.basename(p) for p in removed) == sorted(list(files)[:2])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(list(files)[2:])


def test_the_shm_file_is_rewritten_in_place_and_reads_as_safetensors_without_a_copy():
    import os
    import stat

    import torch
    from safetensors.torch import load_file

    from actors.weights.files import SharedWeightFile, map_weight_file
    # mixed element sizes, a scalar and an odd length: every tensor still lands aligned
    first = {"a.weight": torch.randn(3, 5), "b.bias": torch.arange(7, dtype=torch.bfloat16),
             "c.step": torch.tensor(4, dtype=torch.int64), "d.mask": torch.tensor([True, False, True])}
    shared = SharedWeightFile([(n, t.dtype, tuple(t.shape)) for n, t in first.items()], version=1)
    try:
        assert stat.S_IMODE(os.stat(shared.path).st_mode) == 0o600
        assert os.path.basename(shared.path).startswith(f"sead-weights-{os.getpid()}-v1-")
        shared.write(first.items())
        assert {n: t.tolist() for n, t in load_file(shared.path).items()} == {n: t.tolist() for n, t in first.items()}
        second = {n: (t + 1 if t.dtype != torch.bool else ~t) for n, t in first.items()}
        mapped = map_weight_file(shared.path)
        shared.write(second.items())          # the next version, same file
        assert {n: t.tolist() for n, t in mapped.items()} == {n: t.tolist() for n, t in second.items()}
        with pytest.raises(ValueError, match=r"'a.weight' \(5, 3\) is not in the file's layout \(\(3, 5\)\)"):
            shared.write([("a.weight", torch.zeros(5, 3))])
        with pytest.raises(ValueError, match="1 weight\\(s\\) of the layout were not sent"):
            shared.write([(n, t) for n, t in first.items() if n != "b.bias"])
    finally:
        shared.close()
    assert not os.path.exists(shared.path)


def test_every_transport_of_the_registry_names_a_sender_that_exists():
    from actors.weights.senders import WeightTransport, load_attr
    from sead_ray.core.transports import WEIGHT_TRANSPORTS
    for name in WEIGHT_TRANSPORTS:
        needs = WEIGHT_TRANSPORTS.get(name)
        sender = load_attr(needs.sender)
        assert callable(sender.send) and callable(sender.close), name
        assert bool(needs.vllm_init) == needs.vllm_api, name    # vLLM's API needs its init-info builder, nothing else
        if needs.vllm_api:
            assert callable(load_attr(needs.vllm_init)), name
    assert WeightTransport is not None
