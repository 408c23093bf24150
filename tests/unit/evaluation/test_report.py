"""The run report: pooled CR grid by hand, plots written and readable, clear errors on bad input."""
import json

import pytest

from sead_ray.cli.main import main
from sead_ray.evaluation.report import ReportError, cr_grid, read_metrics_rows, write_report
from sead_ray.scenario.state import Dimension, StateSchema


def _schema():
    return StateSchema((Dimension("cooperation", ("lo", "hi")), Dimension("emotion", ("lo", "mid", "hi")),
                        Dimension("trust", ("lo", "hi"))))


def _curriculum():
    # (cooperation, emotion, trust): attempts, successes
    cells = {(0, 0, 0): (2, 1), (0, 0, 1): (2, 2), (1, 2, 0): (4, 1), (1, 1, 1): (0, 0)}
    states = {"-".join(map(str, s)): {"attempts": a, "successes": k} for s, (a, k) in cells.items()}
    return {"iteration": 3, "states": states,
            "band_fractions": {"easy": 0.25, "medium": 0.25, "hard": 0.25, "unseen": 0.25}}


def test_cr_grid_pools_over_the_other_dimensions():
    grid = cr_grid(_curriculum(), _schema(), 0, 1)
    assert grid == [[0.75, None, None], [None, None, 0.25]]   # (1+2)/(2+2); 1/4; no attempts -> None
    assert cr_grid(_curriculum(), _schema(), 0, 2) == [[0.5, 1.0], [0.25, None]]


def _run_dir(tmp_path, rows):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "curriculum").mkdir()
    (tmp_path / "curriculum" / "iter_0003.json").write_text(json.dumps(_curriculum()))
    return tmp_path


def test_report_writes_plots_and_table(tmp_path):
    from PIL import Image
    rows = [{"iteration": i, "phase": "train", "cr": 0.25 * i, "reward_mean": 0.2 * i, "train_loss": 0.1 / i,
             "train_kl": 0.0, "train_logprob_mismatch_mean": 1e-6 * i, "train_grad_norm": 2.0, "iteration_s": 60.0,
             "band_fractions": {"easy": 0.1 * i, "hard": 0.5}} for i in (1, 2, 3)]
    rows.append({**rows[1], "cr": 0.99})        # a redone iteration (resume): the last row wins
    rows.append({"iteration": 0, "phase": "eval", "cr": 0.5})
    run = _run_dir(tmp_path, rows)
    assert [r["cr"] for r in read_metrics_rows(run / "metrics.jsonl")] == [0.25, 0.99, 0.75]
    files = write_report(run, _schema(), checkpoint="ck/iter_0003")
    assert [f.name for f in files] == ["summary.md", "progress.png", "cr_by_state.png"]
    for png in files[1:]:
        with Image.open(png) as im:
            assert im.size[0] > 400 and im.size[1] > 300
    table = files[0].read_text()
    assert "| 2 | 0.99 | 0.400 |" in table and "ck/iter_0003" in table


def test_report_shows_the_frontier_per_start(tmp_path):
    from PIL import Image
    rows = [{"iteration": i, "phase": "train", "cr": 0.5, "n": 16, "successes": 8,
             "cr_by_start": {"d0": {"cr": 0.5 + 0.2 * i, "n": 6}, "cold": {"cr": 0.1 * i, "n": 10}}} for i in (1, 2)]
    rows += [{"iteration": i, "phase": phase, "n": 16, "successes": k}
             for i, phase, k in ((0, "eval", 1), (0, "eval_d0", 9), (2, "eval", 4), (2, "eval_d0", 15))]
    rows[-1]["cr_by_user_set"] = {"hard": {"successes": 7, "n": 8}, "soft": {"successes": 8, "n": 8}}
    files = write_report(_run_dir(tmp_path, rows), _schema())
    assert [f.name for f in files] == ["summary.md", "progress.png", "cr_by_start.png", "cr_by_state.png"]
    with Image.open(files[2]) as im:
        assert im.size[0] > 400
    table = files[0].read_text()
    assert "| 2 | 0.90 (6) | 0.20 (10) |" in table                   # training calls: d0, then cold
    assert "| 0 | 9/16 | 1/16 |" in table and "| 2 | 15/16 (hard 7/8, soft 8/8) | 4/16 |" in table   # d0, cold


def test_report_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(ReportError, match="no metrics.jsonl"):
        write_report(tmp_path, _schema())
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1, "phase": "train"}\n{oops\n')
    with pytest.raises(ReportError, match=r"metrics.jsonl:2: not valid JSON"):
        write_report(tmp_path, _schema())
    assert main(["report", str(tmp_path)]) == 2
    assert "not a sead-ray run directory" in capsys.readouterr().err


def test_learning_is_claimed_only_with_significance(tmp_path):
    from sead_ray.evaluation.report import learning_summary
    flat = [{"iteration": i, "phase": "train", "successes": 5, "n": 16} for i in (1, 2, 3, 4)]
    summary = learning_summary(flat)
    assert [p["text"] for p in summary["per_iteration"]][0] == "5/16 = 0.31 [0.14, 0.56]"
    assert summary["verdict"]["gain"] is False and "descriptive only" in summary["verdict_text"]
    # 6/32 -> 26/32 pooled: p far below 0.05; an error call is left out of n
    rising = [{"iteration": 1, "phase": "train", "successes": 3, "n": 17, "error_calls": 1},
              {"iteration": 2, "phase": "train", "successes": 3, "n": 16},
              {"iteration": 3, "phase": "train", "successes": 13, "n": 16},
              {"iteration": 4, "phase": "train", "successes": 13, "n": 16}]
    summary = learning_summary(rising)
    v = summary["verdict"]
    assert (v["before"]["k"], v["before"]["n"], v["after"]["k"], v["after"]["n"]) == (6, 32, 26, 32)
    assert v["gain"] is True and v["p_one_sided"] < 1e-4
    # training calls across a moving curriculum are described, never called significant (issue 51)
    assert "significant" not in summary["verdict_text"] and "descriptive only" in summary["verdict_text"]
    assert learning_summary(rising[:3])["verdict"] is None       # fewer than 2 + 2 iterations: no claim
    # the report carries both, and the held-out evaluations apart
    held_out = [{"iteration": 0, "phase": "eval", "successes": 2, "n": 8},
                {"iteration": 4, "phase": "eval", "successes": 6, "n": 8}]
    run = _run_dir(tmp_path, rising + held_out)
    table = write_report(run, _schema())[0].read_text()
    assert "## Training calls, first and last iterations" in table and "26/32 = 0.81" in table
    assert "## Learning verdict" not in table            # no held-out calls written: no test to lead with
    assert "after iteration 0: 2/8 = 0.25" in table and "after iteration 4: 6/8 = 0.75" in table


def test_the_run_tests_its_own_claim_on_its_held_out_owners(tmp_path):
    """Issue 51: the first held-out evaluation against the last, owner by owner (exact one-sided McNemar), pooled
    and per user set; the report leads with it."""
    from sead_ray.evaluation.held_out import format_held_out_test, held_out_test
    from sead_ray.evaluation.report import write_report
    from sead_ray.evaluation.significance import mcnemar_exact_greater
    rows = [{"iteration": i, "phase": "train", "successes": 5, "n": 16} for i in (1, 2, 3, 4)]
    run = _run_dir(tmp_path, rows)
    calls = run / "dialogues"
    calls.mkdir(exist_ok=True)

    def write(name, iteration, won):
        lines = [json.dumps({"dialogue_id": f"it{iteration:04d}-p{i:04d}-r0", "outcome": "success" if w else "failure",
                             "profile": {"user_set": "soft" if i < 8 else "hard"}, "error": None})
                 for i, w in enumerate(won)]
        (calls / name).write_text("\n".join(lines) + "\n")
    before = [False] * 12 + [True] * 4                       # 4/16: owners 12-15 (hard) won
    after = [True] * 7 + [False] * 5 + [True, False, True, True]   # 7 soft lost -> won, owner 13 won -> lost
    write("eval_0000.jsonl", 0, before)
    write("eval_0004.jsonl", 4, after)
    write("eval_0004_d0.jsonl", 4, [True] * 16)              # a deeper start: not the cold test
    test = held_out_test(run)
    assert (test["before_iteration"], test["after_iteration"], test["n"], test["before"], test["after"]) == (0, 4, 16, 4, 10)
    assert (test["lost_to_won"], test["won_to_lost"]) == (7, 1)
    assert test["p_one_sided"] == mcnemar_exact_greater(list(zip(before, after))) and test["significant"]
    assert test["by_user_set"]["soft"]["lost_to_won"] == 7 and not test["by_user_set"]["hard"]["significant"]
    text = format_held_out_test(test)
    assert text.startswith("held-out cold calls, the same owners, greedy: after the warm start vs after iteration 4")
    assert "4/16 -> 10/16 won (7 lost -> won, 1 won -> lost)" in text and ": significant at 0.05" in text
    summary = write_report(run, _schema())[0].read_text()
    assert summary.index("## Learning verdict") < summary.index("| iter | CR |") and text in summary


def test_the_report_lists_what_the_agent_made_up_in_won_calls(tmp_path, scenario):
    """Issue 51: sentences of the policy's turns in won calls that are none of the scenario's, most frequent first,
    with the nearest scenario sentence; lost calls and scripted turns are not the policy's wins."""
    from sead_ray.evaluation.made_up import made_up, scenario_sentences
    from sead_ray.evaluation.report import write_report
    own = scenario_sentences(scenario)
    assert scenario.facts[1] in own and scenario.rule_user.ask in own
    fact = scenario.facts[1]

    def call(outcome, *turns, scripted=()):
        return {"outcome": outcome, "turns": [{"agent": t, "scripted": t in scripted} for t in turns]}
    records = [call("success", scenario.rule_user.opening, fact.upper() + " The credit never expires.",
                    "Honestly, it never expires!", scripted=()),
               call("success", "The credit never expires.", fact.replace(".", " !")),
               call("failure", "A sentence of a lost call."),
               call("success", "A scripted sentence.", scripted=("A scripted sentence.",))]
    found = made_up(records, own)
    assert [(f["sentence"], f["said"], f["won_calls"]) for f in found] == [
        ("The credit never expires.", 2, 2), ("Honestly, it never expires!", 1, 1)]
    assert found[0]["nearest"] in own and 0 < found[0]["similarity"] < 1
    rows = [{"iteration": 1, "phase": "train", "successes": 3, "n": 4}]
    run = _run_dir(tmp_path, rows)
    (run / "dialogues").mkdir(exist_ok=True)
    (run / "dialogues" / "iter_0001.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    summary = write_report(run, _schema(), own_sentences=own)[0].read_text()
    assert "- `iter_0001.jsonl`: 2 sentence(s), said 3 time(s), in 3 won call(s)" in summary
    assert "2 x 'The credit never expires.'" in summary
