"""benchmarks/gpu_check.py runs where there is no GPU (the CUDA checks skipped, each with its reason), prints a
line per check, writes its JSON after every check and goes on past a failed one; it needs nothing beyond torch,
transformers and the project's pure modules."""
import importlib.util
import json
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
CHECKS = ["device", "context", "allocator", "nccl", "model", "logits_to_keep", "grpo_step", "logprobs", "throughput",
          "shared_prefix"]


def test_gpu_check_runs_on_cpu_with_one_line_per_check_and_its_json(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--small", "--cpu", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert [line.split("]")[1].split(":")[0].strip() for line in lines] == CHECKS
    results = json.loads(out.read_text())
    assert list(results) == CHECKS + ["summary"]
    status = {k: results[k]["status"] for k in CHECKS}
    assert status == {"device": "ok", "context": "skip", "allocator": "skip", "nccl": "ok", "model": "ok",
                      "logits_to_keep": "ok", "grpo_step": "ok", "logprobs": "skip", "throughput": "ok",
                      "shared_prefix": "ok"}
    assert all("CUDA" in results[k]["reason"] or "GPU" in results[k]["reason"] for k in CHECKS if status[k] == "skip")
    # the weight path: packed into weight_sync.bucket_mb buffers, broadcast and unpacked bit for bit (gloo here)
    assert results["nccl"]["identical"] is True and results["nccl"]["backend"] == "gloo"
    # the model built from a config has the parameter count the plan computes for its shape
    assert results["model"]["params_m"] == results["model"]["plan_params_m"]
    assert results["grpo_step"]["trained_tokens"] == 128 and results["throughput"]["trained_tokens_per_s"] > 0
    # the shared prefix against the per-call path, in fp32 here (bf16 on a GPU, with its own tolerance)
    shared = results["shared_prefix"]
    assert shared["dtype"] == "float32" and shared["max_grad_rel_diff"] <= 1e-4 and shared["root_tokens"] > 0
    # the versions a GPU result depends on (no driver on CPU)
    import torch
    import transformers
    assert (results["device"]["torch"], results["device"]["transformers"]) == (torch.__version__, transformers.__version__)
    assert "cuda" in results["device"] and results["device"]["driver"] is None
    summary = results["summary"]
    assert {k: summary[k] for k in ("status", "failed", "skipped")} == {
        "status": "ok", "failed": [], "skipped": ["context", "allocator", "logprobs"]}
    # what one GPU cannot prove is said, in the JSON and on the console
    assert {"nccl across ranks", "vllm"} <= set(summary["not_proven"])
    assert "not proven here" in proc.stdout and "nccl across ranks:" in proc.stdout and "vllm:" in proc.stdout


def test_a_failed_check_is_reported_and_the_rest_still_run(tmp_path, monkeypatch, capsys):
    gpu_check = _load_gpu_check()

    def broken(args, dtype):
        raise RuntimeError("CUDA out of memory (simulated)")
    monkeypatch.setattr(gpu_check, "build_model", broken)
    out = tmp_path / "partial.json"
    results = gpu_check.main(gpu_check.parse_args(["--small", "--cpu", "--out", str(out)]))
    printed = capsys.readouterr().out
    assert "[FAIL] model: RuntimeError: CUDA out of memory (simulated)" in printed
    assert "[ok] nccl" in printed and "[skip] grpo_step: no model (the model check failed)" in printed
    assert "[skip] logits_to_keep: no model" in printed
    assert results["summary"]["status"] == "fail" and results["summary"]["failed"] == ["model"]
    assert json.loads(out.read_text())["model"]["status"] == "fail"      # written after every check


def _load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    return gpu_check


def test_a_transformers_that_ignores_logits_to_keep_fails_loudly(tmp_path, monkeypatch, capsys):
    """A model whose forward drops `logits_to_keep` returns logits of every position: the trainer would read its
    logprobs at the wrong ones without an error (a gather of the first positions), so the check fails."""
    gpu_check = _load_gpu_check()
    real = gpu_check.build_model

    def ignoring(args, dtype):
        model = real(args, dtype)
        forward = model.forward
        model.forward = lambda *a, logits_to_keep=0, **kw: forward(*a, **kw)
        return model
    monkeypatch.setattr(gpu_check, "build_model", ignoring)
    results = gpu_check.main(gpu_check.parse_args(["--small", "--cpu", "--out", str(tmp_path / "r.json")]))
    printed = capsys.readouterr().out
    assert "[FAIL] logits_to_keep: AssertionError: transformers" in printed
    assert "ignored logits_to_keep = a tensor of 4 positions: logits of shape (1, 64, 512), (1, 4, 512) expected" in printed
    assert results["summary"]["status"] == "fail" and results["summary"]["failed"][0] == "logits_to_keep"
