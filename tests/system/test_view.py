"""`sead-ray view`: the reader of big and torn JSON Lines files and the folder's confinement (fast), bad input
with exit code 2, and a browser test (Playwright driving the distribution's Chromium, `make chromium`) on a
small real run made here: the run page's CRs are metrics.jsonl's, the dialogue browser finds a failed call
and shows its turns with both state series, the talk page plays two exchanges with a scripted agent and saves
them as a dialogue record, a path out of the folder is refused. It also writes the README's screenshots."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sead_ray.cli.main import main
from sead_ray.view.files import Folder, LineIndex, ViewError
from tests.conftest import EMBEDDED_CONFIG, FINISHED_RUN_PREFILL, ROOT

CHROMIUM = "/usr/bin/chromium"
# The README's screenshots: SEAD_RAY_SCREENSHOTS=docs/img writes them there (elsewhere: a temporary folder,
# so that `make test` leaves the working tree as it was)
SHOTS_ENV = "SEAD_RAY_SCREENSHOTS"


def _summary(value):
    return value if isinstance(value, dict) else None


def test_line_index_reads_by_offset_skips_torn_lines_and_follows_a_growing_file(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2, "torn\n\n[1, 2]\n{"a": 3}\n{"a": 4')   # a torn line, a non-record, a half line
    index = LineIndex(path, _summary).refresh()
    assert [s["a"] for s in index.summaries] == [1, 3] and list(index.linenos) == [1, 5]
    assert index.problems() == {"torn_lines": [2], "torn": 1, "malformed_lines": [4], "malformed": 1,
                                "incomplete_last_line": True}
    assert index.record(1) == {"a": 3}
    with pytest.raises(ViewError, match="no record 2"):
        index.record(2)
    with open(path, "ab") as f:   # the writer finishes its line and adds one: only the new bytes are read
        f.write(b'}\n{"a": 5}\n')
    index.refresh()
    assert [s["a"] for s in index.summaries] == [1, 3, 4, 5] and not index.problems()["incomplete_last_line"]
    path.write_text('{"a": 9}\n')   # replaced (written whole, as dialogues files are): indexed again
    assert [s["a"] for s in index.refresh().summaries] == [9]


def test_a_line_longer_than_the_limit_is_skipped_without_holding_it(tmp_path, monkeypatch):
    import sead_ray.view.files as files
    monkeypatch.setattr(files, "MAX_LINE", 1000)
    monkeypatch.setattr(files, "CHUNK", 256)
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n' + json.dumps({"a": "x" * 5000}) + '\n{"a": 2}\n')
    index = LineIndex(path, _summary).refresh()
    assert [s["a"] for s in index.summaries] == [1, 2] and index.problems()["torn"] == 1


def test_paths_are_confined_to_the_folder(tmp_path):
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "run" / "metrics.jsonl").write_text("")
    (tmp_path / "outside.jsonl").write_text("{}\n")
    (root / "link.jsonl").symlink_to(tmp_path / "outside.jsonl")
    folder = Folder(root)
    assert folder.path("run/metrics.jsonl") == (root / "run" / "metrics.jsonl").resolve()
    for bad in ("../outside.jsonl", "run/../../outside.jsonl", str(tmp_path / "outside.jsonl"), "link.jsonl"):
        with pytest.raises(ViewError, match="outside the viewed folder") as err:
            folder.path(bad)
        assert err.value.status == 403
    with pytest.raises(ViewError) as err:
        folder.path("run/nope.jsonl")
    assert err.value.status == 404


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["view", str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "not a sead-ray run directory" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.jsonl").write_text("")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["view", str(run), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--port {port}: already in use" in err


def _records(n: int, scenario) -> list[dict]:
    """n dialogue records as the rollout writes them (Trajectory.to_json): every third a success, every
    fourth with a format failure, the last one ended by an error."""
    from sead_ray.play.dialogue import Trajectory, Turn
    from sead_ray.scenario.profiles import Profile
    out = []
    for i in range(n):
        ok = i % 4 != 0
        turn = Turn(f"words {i}", {"cooperation": 2, "emotion": 1, "trust": 3} if ok else None, "raw", ok, 0, 9,
                    user=f"reply {i}", user_state={"cooperation": 1, "emotion": 1, "trust": i % 6},
                    user_status="accept" if i % 3 == 0 else "continue")
        end = "error" if i == n - 1 else "accept" if i % 3 == 0 else "timeout"
        traj = Trajectory(f"d{i}", Profile((i % 5, 1, 2), ("Asks how long the 700 yuan will last",),
                                           extra={"user_set": "soft" if i % 2 else "hard"}),
                          [turn], "success" if end == "accept" else "failure", end, error="boom" if end == "error" else None)
        out.append(traj.to_json(scenario))
    return out


def test_the_api_pages_and_filters_a_big_file_and_guards_hosts_and_origins(tmp_path, scenario, monkeypatch):
    from starlette.testclient import TestClient

    from sead_ray.core.config import dump_config, load_config
    from sead_ray.view.app import build_app
    run = tmp_path / "run"
    (run / "dialogues").mkdir(parents=True)
    dump_config(load_config(EMBEDDED_CONFIG, ["user.backend=rule"]), run / "config.yaml")
    (run / "metrics.jsonl").write_text('{"iteration": 1, "phase": "train", "n": 120, "successes": 40, "cr": 0.33}\n{"iter')
    records = _records(120, scenario)
    lines = [json.dumps(r) for r in records]
    lines.insert(7, lines[7][:40])   # a torn line in the middle
    (run / "dialogues" / "iter_0001.jsonl").write_text("\n".join(lines) + "\n")
    client = TestClient(build_app(run, 4321), base_url="http://127.0.0.1:4321")
    page = client.get("/api/dialogues", params={"file": "dialogues/iter_0001.jsonl", "offset": 100, "limit": 50}).json()
    assert page["total"] == 120 and page["matched"] == 120 and [r["index"] for r in page["rows"]] == list(range(100, 120))
    assert page["problems"]["torn_lines"] == [8]
    for filters, expect in (({"outcome": "success"}, [i for i in range(120) if i % 3 == 0 and i != 119]),
                            ({"format": "yes", "user_set": "hard"}, [i for i in range(120) if i % 4 == 0]),
                            ({"error": "yes"}, [119]), ({"state": "3-1-2"}, [i for i in range(120) if i % 5 == 3])):
        got = client.get("/api/dialogues", params={"file": "dialogues/iter_0001.jsonl", "limit": 200, **filters}).json()
        assert [r["index"] for r in got["rows"]] == expect, filters
    one = client.get("/api/dialogue", params={"file": "dialogues/iter_0001.jsonl", "index": 9}).json()
    assert one["record"] == records[9] and one["line"] == 11 and one["reward"] == 1.0
    assert one["made_up"] == [["words 9"]]     # its one turn's words are none of the scenario's
    run_page = client.get("/api/run", params={"path": ""}).json()
    assert [p["text"] for p in run_page["series"]] == ["40/120 = 0.33 [0.26, 0.42]"]
    assert run_page["problems"]["incomplete_last_line"]   # a row being written: shown once it is whole
    # the 40 won calls' sentences, none the scenario's (the error call is no win)
    assert [(m["file"], m["total"], m["said"]) for m in run_page["made_up"]] == [("dialogues/iter_0001.jsonl", 40, 40)]
    with open(run / "metrics.jsonl", "a") as f:   # the run writes on: the page's next poll sees a new version
        f.write('ation": 2, "phase": "train", "n": 120, "successes": 60, "cr": 0.5}\n')
    later = client.get("/api/run", params={"path": ""}).json()
    assert later["version"] != run_page["version"] and [p["k"] for p in later["series"]] == [40, 60]
    assert client.get("/api/folder", headers={"host": "evil.example:4321"}).status_code == 403
    talk = {"config": "", "agent": "script:honest"}
    assert client.post("/api/talk", json=talk, headers={"origin": "http://evil.example"}).status_code == 403
    started = client.post("/api/talk", json=talk, headers={"origin": "http://127.0.0.1:4321"}).json()
    assert started["turns"][0]["agent_estimate"] and started["agent"] == "script:honest"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    missing_key = client.post("/api/talk", json={**talk, "agent": "openai:gpt@https://api.example.com/v1"},
                              headers={"origin": "http://127.0.0.1:4321"})
    assert missing_key.status_code == 400 and "OPENAI_API_KEY" in missing_key.json()["error"]


# ------------------------------------------------------------------------------------------- the browser test
# The run is the session's finished run (tests/conftest.py): its prefill hands every turn a state estimate,
# so the calls carry both state series, as a trained agent's would.
PREFILL = FINISHED_RUN_PREFILL


def _compare_from_held_out(run: Path, out: Path) -> None:
    """A comparison of the run's agent before training and after its last iteration, from its held-out calls
    (the same profiles and seeds, in the same order), written as `sead-ray compare` writes one."""
    from sead_ray.evaluation.compare import agent_dir_name, compare_rows, write_compare
    from sead_ray.evaluation.metrics import read_dialogues
    files = sorted((run / "dialogues").glob("eval_*.jsonl"))
    records = {"untrained": read_dialogues(files[0]), f"after {files[-1].stem}": read_dialogues(files[-1])}
    for i, (label, source) in enumerate(zip(records, (files[0], files[-1]))):
        (out / "agents" / agent_dir_name(i, label)).mkdir(parents=True)
        shutil.copy(source, out / "agents" / agent_dir_name(i, label) / "dialogues.jsonl")
    write_compare(compare_rows(records), out, "held-out calls of the run before and after training")


@pytest.fixture(scope="module")
def viewer(finished_run, tmp_path_factory):
    """A folder with a real 4-iteration run and a comparison, served by `sead-ray view` on a free port."""
    folder = tmp_path_factory.mktemp("view")
    # the session's run, without the optimizer states (the page and the talk's engine read hf/ only)
    shutil.copytree(finished_run.path, folder / "run", symlinks=True, ignore=shutil.ignore_patterns("deepspeed"))
    _compare_from_held_out(folder / "run", folder / "compare")
    (folder.parent / "outside.jsonl").write_text("{}\n")
    server = subprocess.Popen([sys.executable, "-m", "sead_ray.cli.main", "view", str(folder), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line, seen = "", []
    while "open http" not in line:
        line = server.stdout.readline()
        seen.append(line)
        assert line or server.poll() is None, "".join(seen)
    url = re.search(r"http://127\.0\.0\.1:\d+", line).group(0)
    yield folder, url
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture(scope="module")
def page(viewer):
    from playwright.sync_api import sync_playwright
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} missing: `make chromium` installs the distribution's Chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        errors = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page
        browser.close()
        assert not errors, errors


@pytest.fixture(scope="module")
def shot(tmp_path_factory):
    """Takes a full-page screenshot named view-<name>.png into $SEAD_RAY_SCREENSHOTS (relative: to the repository)."""
    folder = Path(os.environ.get(SHOTS_ENV) or tmp_path_factory.mktemp("shots"))
    folder = folder if folder.is_absolute() else ROOT / folder
    folder.mkdir(parents=True, exist_ok=True)

    def take(page, name: str) -> None:
        page.screenshot(path=str(folder / f"view-{name}.png"), full_page=True)
        assert (folder / f"view-{name}.png").stat().st_size > 10_000
    return take


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_run_page_curriculum_and_compare_show_the_files_numbers(viewer, page, shot):
    folder, url = viewer
    run = folder / "run"
    page.goto(f"{url}/#/run?path=run")
    page.wait_for_selector("[data-testid=iterations] tr[data-iteration]")
    train = [r for r in _rows(run / "metrics.jsonl") if r["phase"] == "train"]
    cells = page.query_selector_all("[data-testid=cr]")
    assert [int(c.get_attribute("data-k")) for c in cells] == [r["successes"] for r in train]
    assert [int(c.get_attribute("data-n")) for c in cells] == [r["n"] - r["error_calls"] for r in train]
    assert [float(c.get_attribute("data-cr")) for c in cells] == [r["cr"] for r in train]
    summary = (run / "report" / "summary.md").read_text()
    # the report's own verdict texts: the held-out test first (where the run has two evaluations), training calls apart
    if "## Learning verdict" in summary:
        verdict = summary.split("## Learning verdict")[1].split("```")[1].strip()
        assert page.inner_text("[data-testid=verdict]").strip() == verdict
    training = summary.split("## Training calls, first and last iterations")[1].split("```")[1].strip()
    assert page.inner_text("[data-testid=training-verdict]").strip() == training
    import urllib.request
    with urllib.request.urlopen(f"{url}/api/run?path=run") as r:   # what the agent made up, where it won
        made = json.loads(r.read())["made_up"]
    card = page.query_selector("[data-testid=made-up]")
    assert (card is not None) == bool(made) and all(m["file"] in card.inner_text() for m in made)
    shot(page, "run")

    page.goto(f"{url}/#/curriculum?run=run&iteration=4")
    calls = _rows(run / "dialogues" / "iter_0004.jsonl")
    # the cell of the state the iteration's first call started in
    state = "-".join(str(calls[0]["profile"][d]) for d in ("cooperation", "emotion", "trust"))
    page.wait_for_selector(f'.grid-panel td[data-state="{state}"]').click()
    page.wait_for_selector("[data-testid=cell-calls] table tr[data-index]")
    listed = page.query_selector_all("[data-testid=cell-calls] tr[data-index]")
    key = [state == "-".join(str(r["profile"][d]) for d in ("cooperation", "emotion", "trust")) for r in calls]
    started = [i for i, same in enumerate(key) if same]
    assert [int(r.get_attribute("data-index")) for r in listed] == started
    shot(page, "curriculum")

    page.goto(f"{url}/#/compare")
    page.wait_for_selector("[data-testid=compare] tr[data-agent]")
    table = json.loads((folder / "compare" / "compare.json").read_text())
    shown = [r.inner_text() for r in page.query_selector_all("[data-testid=compare] [data-testid=cr]")]
    assert shown == [f"{r['cr']:.3f} [{r['cr_low']:.3f}, {r['cr_high']:.3f}]" for r in table]
    assert "better" in page.inner_text("[data-testid=compare] [data-testid=paired] >> nth=-1")
    shot(page, "compare")


@pytest.mark.slow
def test_dialogue_browser_filters_to_a_failed_call_with_both_state_series(viewer, page, shot):
    folder, url = viewer
    calls = _rows(folder / "run" / "dialogues" / "iter_0004.jsonl")
    failed = [i for i, r in enumerate(calls) if r["outcome"] == "failure"]
    assert failed, "the tiny agent won every call: no failed call to look at"
    page.goto(f"{url}/#/dialogues?file=run/dialogues/iter_0004.jsonl")
    page.wait_for_selector("[data-testid=calls]")
    page.select_option("select[name=outcome]", "failure")
    page.wait_for_function("location.hash.includes('outcome=failure')")
    page.wait_for_selector("[data-testid=calls] tr[data-index]")
    rows = page.query_selector_all("[data-testid=calls] tr[data-index]")
    assert [int(r.get_attribute("data-index")) for r in rows] == failed
    assert {r.get_attribute("data-outcome") for r in rows} == {"failure"}
    shot(page, "dialogues")

    rows[0].click()
    page.wait_for_selector("[data-testid=turn]")
    record = calls[failed[0]]
    assert [e.inner_text() for e in page.query_selector_all("[data-testid=agent-words] .words")] \
        == [t["agent"] for t in record["turns"]]
    assert [e.inner_text() for e in page.query_selector_all("[data-testid=user-words] .words")] \
        == [t["user"] for t in record["turns"]]
    assert page.inner_text("[data-testid=end-reason]") == record["end_reason"]
    for dim in ("cooperation", "emotion", "trust"):
        hidden = json.loads(page.get_attribute(f"[data-testid=series-{dim}] .hidden-series", "data-values"))
        estimate = json.loads(page.get_attribute(f"[data-testid=series-{dim}] .estimate-series", "data-values"))
        assert hidden == [record["profile"][dim]] + [t["user_state"][dim] for t in record["turns"]]
        assert estimate == [t["agent_estimate"][dim] for t in record["turns"]] and None not in estimate
    shot(page, "call")


@pytest.mark.slow
def test_talk_page_two_exchanges_saved_as_a_dialogue_record(viewer, page, shot):
    from sead_ray.evaluation.metrics import read_dialogues
    folder, url = viewer
    page.goto(f"{url}/#/talk")
    page.select_option("select[name=config]", "run")
    page.select_option("select[name=agent]", "script:honest")
    page.click("[data-testid=start]")
    page.wait_for_selector("[data-testid=talk-turn]")
    said = ["Sorry, who is calling?", "What's the catch? Will this cost me anything?"]
    for k, text in enumerate(said):
        page.fill("[data-testid=say]", text)
        page.select_option("select[name=state-trust]", str(2 + k))
        page.click("[data-testid=send]")
        page.wait_for_function(f"document.querySelectorAll('[data-testid=talk-turn]').length === {k + 2}")
    turns = page.query_selector_all("[data-testid=talk-turn]")
    assert all(json.loads(e.get_attribute("data-values")) for e in page.query_selector_all("[data-testid=estimate]"))
    assert "free" in turns[2].inner_text()   # the honest script answers the concern voiced
    shot(page, "talk")
    page.click("[data-testid=save]")
    saved = page.wait_for_selector("[data-testid=saved-path]").inner_text()
    records = read_dialogues(folder / saved)   # the format of dialogues files, validated
    assert [t["user"] for t in records[0]["turns"][:2]] == said
    assert [t["user_state"]["trust"] for t in records[0]["turns"][:2]] == [2, 3]
    assert records[0]["agent"] == "script:honest" and records[0]["end_reason"] == "timeout"


@pytest.mark.slow
def test_talk_with_the_runs_latest_checkpoint_on_a_local_engine(viewer):
    import httpx

    from sead_ray.evaluation.metrics import read_dialogues
    from sead_ray.training.checkpoint import latest_checkpoint, load_train_state
    folder, url = viewer
    client = httpx.Client(base_url=url, headers={"origin": url}, timeout=300)
    talk = client.post("/api/talk", json={"config": "run", "agent": "run:run"})   # starts a vLLM engine (~20 s)
    assert talk.status_code == 200, talk.text
    sid = talk.json()["id"]
    for text in ("Who is calling?", "What's the catch?"):
        answer = client.post(f"/api/talk/{sid}/say", json={"text": text})
        assert answer.status_code == 200, answer.text
    saved = client.post(f"/api/talk/{sid}/save", json={}).json()["path"]
    record = read_dialogues(folder / saved)[0]
    version = load_train_state(latest_checkpoint(folder / "run")).version("agent")
    assert [t["user"] for t in record["turns"]] == ["Who is calling?", "What's the catch?", None]
    assert record["policy_versions"] == [version] == [4] and record["agent"] == "run:run"
    assert all(t["agent_tokens"] > 0 and t["agent_raw"].startswith(PREFILL) for t in record["turns"])


@pytest.mark.slow
def test_a_path_out_of_the_folder_is_refused(viewer, page):
    import urllib.error
    import urllib.request
    _, url = viewer
    page.goto(f"{url}/#/dialogues?file=../outside.jsonl")
    assert "outside the viewed folder" in page.wait_for_selector("[data-testid=error]").inner_text()
    for query in ("file=../outside.jsonl", "file=%2Fetc%2Fpasswd", "file=run/../../outside.jsonl"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{url}/api/dialogues?{query}", timeout=10)
        assert err.value.code == 403
