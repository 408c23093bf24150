"""`ray job submit` as users run it, on a real two-node local cluster (`ray start --head` plus a second
raylet offering `rollout`): a tiny training run is stopped with `ray job stop` (SIGTERM), leaves a checkpoint
of its last completed iteration, and a second job resumes it to the end.

The run also trains its simulator (the paper's train-URM ablation, `user.train`): a second trainer group
(Ray Train + DeepSpeed) trains the LLM simulator, on the `rollout` node, on its own turns with the opposite
reward, and both models' weights reach their engines through vLLM's transfer API over gloo, by the same path
(TrainedRole.publish); the checkpoint holds both models and the resumed job continues both."""
import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import EMBEDDED_CONFIG, ROOT, TEST_SETTING
from tests.helpers.servers import free_port

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
SETTINGS = ["models.agent=tiny:llama-h64", "models.user=tiny:llama-h64", "user.backend=vllm", "user.train=true",
            "dialogue.user.max_tokens=48", "dialogue.user_reply_max_chars=24", "engine.max_num_seqs=16",
            "placement.user.node_resource=rollout",
            "weight_sync.transport=gloo", "placement.agent.cpus=0.25",
            "placement.trainer.cpus=0.25", "train.iterations=4", "train.batch_size=4", "train.micro_batch_size=2",
            "train.checkpoint_every=0", "dialogue.max_turns=3", "dialogue.agent_train.max_tokens=12",
            "engine.kv_cache_mb=64", "engine.max_model_len=2048", "train.lr=1e-3", "seed=3",
            *TEST_SETTING]




def _ray(*args, timeout=120, check=True):
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([str(BIN / "ray"), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"ray {' '.join(map(str, args))}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)   # the CLI colours its output


def _agent_ports() -> list[str]:
    """Two raylets on one machine: each node's agents need ports of their own (the defaults collide)."""
    return [f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
            "--disable-usage-stats"]


@dataclass
class JobCluster:
    address: str      # the dashboard's, for `ray job`
    temp_dir: str     # RAY_TMPDIR under which `ray start --head` left its address file


@pytest.fixture(scope="module")
def job_cluster():
    """A cluster of its own (its own temp dir), stopped by killing only its processes: `ray stop`
    would also stop the test session's in-process cluster."""
    import psutil
    temp_dir = tempfile.mkdtemp(prefix="rjt", dir="/tmp")
    gcs_port, dashboard_port = free_port(), free_port()
    try:
        # the head's temp dir is where Ray looks for a running cluster when RAY_TMPDIR is temp_dir
        _ray("start", "--head", f"--port={gcs_port}", f"--dashboard-port={dashboard_port}", "--num-cpus=3",
             "--dashboard-host=127.0.0.1", f"--temp-dir={temp_dir}/ray", *_agent_ports())
        # a temp dir of its own: on one machine the second node's runtime-env agent would otherwise
        # garbage-collect the job's working directory under the head's feet
        _ray("start", f"--address=127.0.0.1:{gcs_port}", "--num-cpus=1", '--resources={"rollout": 1}',
             f"--temp-dir={temp_dir}/node", *_agent_ports())
        with pytest.MonkeyPatch.context() as env:
            env.setenv("RAY_AUTH_MODE", "token")   # the cluster's mode: the Jobs SDK client sends the token
            yield JobCluster(f"http://127.0.0.1:{dashboard_port}", temp_dir)
    finally:
        victims = [p for p in psutil.process_iter(["cmdline"]) if temp_dir in " ".join(p.info["cmdline"] or [])
                   or f":{gcs_port}" in " ".join(p.info["cmdline"] or [])]
        for p in victims:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass


def _submit(address, *train_args, stop_wait_s=120) -> str:
    cmd = [sys.executable, "-m", "sead_ray.cli.main", "train", *map(str, train_args)]
    runtime_env = {"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(stop_wait_s)}}
    args = ("job", "submit", "--address", address, "--working-dir", ROOT, "--no-wait", "--runtime-env-json",
            json.dumps(runtime_env), "--", *cmd)
    for _ in range(30):   # a fresh cluster's job agent takes a few seconds to come up
        out = _ray(*args, check=False)
        if "No available agent" not in out:
            break
        time.sleep(2)
    return re.search(r"raysubmit_\w+", out).group(0)


@functools.lru_cache
def _jobs(address):
    """The Jobs API over HTTP (the SDK `ray job` uses): a `ray job status` process per poll would take a
    core from the run it watches on this 2-core machine."""
    from ray.job_submission import JobSubmissionClient
    return JobSubmissionClient(address)


def _status(address, job_id) -> str:
    return str(_jobs(address).get_job_status(job_id).value)


def _wait(address, job_id, until, timeout=900):
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = _status(address, job_id)
        if until(state):
            return state
        time.sleep(2)
    logs = _ray("job", "logs", "--address", address, job_id)
    raise AssertionError(f"job {job_id} still {state} after {timeout} s:\n{logs}")


def _rows(run):
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(2400)
def test_submit_stop_and_resume_through_ray_jobs(job_cluster, tmp_path):
    address, run = job_cluster.address, tmp_path / "run"
    first = _submit(address, "--config", EMBEDDED_CONFIG, "--out", run, *[a for s in SETTINGS for a in ("--set", s)])
    deadline = time.time() + 900
    while not _rows(run):   # iteration 1 done: `ray job stop` now lands in a later iteration
        assert _status(address, first) in ("PENDING", "RUNNING"), _ray("job", "logs", "--address", address, first)
        assert time.time() < deadline, "iteration 1 did not finish in time"
        time.sleep(1)
    _ray("job", "stop", "--address", address, first, timeout=300)
    assert _wait(address, first, lambda s: s in ("STOPPED", "SUCCEEDED", "FAILED")) == "STOPPED"
    logs = _ray("job", "logs", "--address", address, first)
    assert "SIGTERM: stopping at the next safe point" in logs, logs[-3000:]
    # checkpoint_every=0: only the SIGTERM path can have written this checkpoint
    checkpoint = (run / "checkpoints" / "latest").resolve()
    stopped_after = json.loads((checkpoint / "state.json").read_text())["iteration"]
    assert 1 <= stopped_after < 4 and (checkpoint / "hf" / "config.json").exists() and (checkpoint / "deepspeed").is_dir()

    second = _submit(address, "--resume", run)
    assert _wait(address, second, lambda s: s in ("STOPPED", "SUCCEEDED", "FAILED")) == "SUCCEEDED", \
        _ray("job", "logs", "--address", address, second)[-4000:]
    rows = _rows(run)
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert [r["policy_version"] for r in rows] == [1, 2, 3, 4]
    # every version reached the agent engines through vLLM's API: rollouts sampled the trainer's policy
    assert all(r["train_logprob_mismatch_mean"] < 1e-3 for r in rows), [r["train_logprob_mismatch_mean"] for r in rows]
    assert (run / "checkpoints" / "latest").resolve().name == "iter_0004"
    _assert_the_simulator_was_trained_apart(run, rows, stopped_after)


def _assert_the_simulator_was_trained_apart(run, rows, stopped_after):
    from safetensors.torch import load_file

    from sead_ray.core.models import resolve_model
    assert [r["user_policy_version"] for r in rows] == [1, 2, 3, 4], "the simulator's weights were not versioned per step"
    assert all(r["user_train_agent_tokens"] > 0 for r in rows), "no simulator token was trained on"
    # each iteration's calls were answered by the simulator's previous version: sent live within a job, and
    # loaded from the checkpoint by the resumed one (its first iteration is stopped_after + 1)
    for it in range(1, 5):
        answered = {json.loads(line)["user_policy_version"]
                    for line in (run / "dialogues" / f"iter_{it:04d}.jsonl").read_text().splitlines()}
        assert answered == {it - 1}, (it, stopped_after, answered)
    ckpt = run / "checkpoints" / "iter_0004"
    assert json.loads((ckpt / "state.json").read_text())["versions"] == {"agent": 4, "user": 4}
    base = load_file(str(resolve_model("tiny:llama-h64") / "model.safetensors"))
    user, agent = (load_file(str(folder / "hf" / "model.safetensors")) for folder in (ckpt / "user", ckpt))
    assert any(not (user[k] == base[k]).all() for k in base), "the simulator's model did not change"
    assert any(not (user[k] == agent[k]).all() for k in base), "the simulator was trained as the agent, not apart"


def test_a_transport_the_cluster_cannot_carry_is_refused_before_engines_start(job_cluster, tmp_path):
    address = job_cluster.address
    settings = [s for s in SETTINGS if not s.startswith("weight_sync.")] + ["weight_sync.transport=shm"]
    job = _submit(address, "--config", EMBEDDED_CONFIG, "--out", tmp_path / "shm",
                  *[a for s in settings for a in ("--set", s)])
    assert _wait(address, job, lambda s: s in ("STOPPED", "SUCCEEDED", "FAILED"), timeout=300) == "FAILED"
    logs = _ray("job", "logs", "--address", address, job)
    assert "needs the trainer's rank 0 and every agent engine on one node" in logs and "Traceback" not in logs, logs
    assert "starting" not in logs and "engines ready" not in logs        # no engine was started
    assert "exit code 2" in _ray("job", "status", "--address", address, job)


def test_a_run_started_from_a_shell_joins_the_cluster_ray_start_started(job_cluster):
    """`sead-ray train` in a shell of a machine where `ray start --head` runs: Ray finds that cluster by
    itself and refuses the local cluster's sizes; the run joins it (one log line) instead of a traceback."""
    code = ("import json, logging; logging.basicConfig(level=logging.INFO)\n"
            "from actors.ray_cluster import init_ray\nfrom sead_ray.core.config import load_config\n"
            f"print(json.dumps(init_ray(load_config({str(EMBEDDED_CONFIG)!r}, ['ray.dashboard=false']))))")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**env, "RAY_TMPDIR": job_cluster.temp_dir, "RAY_AUTH_MODE": "token"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    resources = json.loads(proc.stdout.strip().splitlines()[-1])
    assert resources["CPU"] == 4 and resources["rollout"] == 1      # the head's 3 and the second node's 1
    assert "joining the Ray cluster started on this machine" in proc.stderr
