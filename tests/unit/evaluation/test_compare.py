"""`sead-ray compare`'s pure part: rows, intervals, the paired test, baselines and the files (no Ray)."""
import json
import math

import pytest

from sead_ray.evaluation.compare import ROW_KEYS, agent_dir_name, agent_labels, compare_rows, upa_parts, write_compare
from sead_ray.evaluation.metrics import DEFAULT_DIMENSIONS, compute_metrics
from tests.unit.evaluation.test_metrics import HAND, st, turn


def call(profile, outcome, end_reason=None, turns=None, group=None, user_set=None):
    """One dialogue record on `profile` (c, e, t): a success in 2 turns, or a 1-turn hang-up."""
    prof = {**st(*profile), "behaviors": ["impatient"]}
    if user_set:
        prof["user_set"] = user_set
    if turns is None:
        turns = ([turn(st(*profile), st(2, 2, 2)), turn(None, st(3, 2, 4), "accept")] if outcome == "success"
                 else [turn(None, st(0, 0, 0), "hangup")])
    rec = {"profile": prof, "turns": turns, "outcome": outcome,
           "end_reason": end_reason or ("accept" if outcome == "success" else "hangup")}
    if group is not None:
        rec["group"] = group
    return rec


PROFILES = [(i % 5, i % 4, i % 6) for i in range(10)]
# A succeeds on 0-3 (4/10); B succeeds on 1-8 (8/10): B better on 4..8 (5 calls), worse on 0 (1 call)
A_WINS = {0, 1, 2, 3}
B_WINS = {1, 2, 3, 4, 5, 6, 7, 8}


def agents():
    a = [call(p, "success" if i in A_WINS else "failure", group=i) for i, p in enumerate(PROFILES)]
    b = [call(p, "success" if i in B_WINS else "failure", group=i) for i, p in enumerate(PROFILES)]
    return {"A": a, "B": b}


def wilson(k, n, z=1.959963984540054):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_cr_and_its_wilson_interval():
    a, b = compare_rows(agents())
    assert (a["agent"], a["n"], a["errors"], a["cr"]) == ("A", 10, 0, pytest.approx(0.4))
    assert b["cr"] == pytest.approx(0.8)
    # by hand: 4/10 -> [0.1682, 0.6873], 8/10 -> [0.4902, 0.9433]
    assert (a["cr_low"], a["cr_high"]) == (pytest.approx(0.16818, abs=1e-4), pytest.approx(0.68732, abs=1e-4))
    assert (b["cr_low"], b["cr_high"]) == (pytest.approx(0.49016, abs=1e-4), pytest.approx(0.94332, abs=1e-4))
    assert (a["cr_low"], a["cr_high"]) == pytest.approx(wilson(4, 10))
    assert a["att"] == pytest.approx(2.0) and a["att_std"] == pytest.approx(0.0)


def test_paired_mcnemar_against_the_first():
    a, b = compare_rows(agents())
    assert a["paired_vs_first"] is None
    pv = b["paired_vs_first"]
    assert (pv["first"], pv["pairs"], pv["better"], pv["worse"]) == ("A", 10, 5, 1)
    assert pv["p_better"] == pytest.approx(7 / 64)        # P(Bin(6, 1/2) >= 5) = (6 + 1) / 64
    assert pv["p_worse"] == pytest.approx(63 / 64)        # P(Bin(6, 1/2) >= 1)


def test_error_calls_are_counted_apart_and_left_out():
    recs = agents()
    # B's call 5 (a success) and call 9 (a failure) die of an engine error: out of n, CR and the pairs
    for i in (5, 9):
        recs["B"][i] = dict(recs["B"][i], outcome="failure", end_reason="error")
    a, b = compare_rows(recs)
    assert (b["n"], b["errors"], b["successes"]) == (8, 2, 7)
    assert b["cr"] == pytest.approx(7 / 8)
    assert (b["cr_low"], b["cr_high"]) == pytest.approx(wilson(7, 8))
    pv = b["paired_vs_first"]
    assert (pv["pairs"], pv["better"], pv["worse"]) == (8, 4, 1)
    assert pv["p_better"] == pytest.approx(6 / 32)        # P(Bin(5, 1/2) >= 4)
    assert a["errors"] == 0 and a["n"] == 10


def test_mismatched_profile_sets_are_refused_naming_the_agents():
    recs = agents()
    recs["B"] = recs["B"][:9]
    with pytest.raises(ValueError, match=r"'A' and 'B'.*10 vs 9"):
        compare_rows(recs)
    recs = agents()
    recs["B"][3] = call((4, 3, 5), "success", group=3)
    with pytest.raises(ValueError, match=r"'A' and 'B'.*dialogue 3"):
        compare_rows(recs)
    recs = agents()
    recs["B"].reverse()
    with pytest.raises(ValueError, match="different profile sets"):
        compare_rows(recs)


def test_upa_matches_metrics_and_the_baselines_match_hand_values():
    parts = upa_parts(HAND, DEFAULT_DIMENSIONS)
    assert parts["upa"] == pytest.approx(compute_metrics(HAND).upa)
    assert parts["upa_estimate_share"] == pytest.approx(3 / 7)   # 3 estimates in 2 + 4 + 1 turns
    # the 3 estimated turns, (state seen, profile): (2,1,3) vs (2,1,3); (3,2,4) vs (2,1,3); (0,0,0) vs (0,0,0)
    # initial-state guess errors: 0; (1/4 + 1/3 + 1/5) / 3; 0
    assert parts["upa_initial_guess"] == pytest.approx(1 - (1 / 4 + 1 / 3 + 1 / 5) / 9)
    # middle guess (2, 1.5, 2.5): errors /max (0, .5/3, .5/5), (1/4, .5/3, 1.5/5), (2/4, 1.5/3, 2.5/5)
    per_turn = [(0 + 0.5 / 3 + 0.5 / 5) / 3, (1 / 4 + 0.5 / 3 + 1.5 / 5) / 3, (2 / 4 + 1.5 / 3 + 2.5 / 5) / 3]
    assert parts["upa_middle_guess"] == pytest.approx(1 - sum(per_turn) / 3)
    no_estimates = upa_parts([HAND[1]], DEFAULT_DIMENSIONS)
    assert no_estimates["upa"] is None and no_estimates["upa_initial_guess"] is None
    assert no_estimates["upa_estimate_share"] == 0.0


def test_state_changes_with_std():
    (row,) = compare_rows({"hand": HAND})
    # final - initial: (2, 2, 2), (2, 1, 2), (0, 0, 0) as (c, e, t)
    assert row["ci"] == pytest.approx(4 / 3) and row["ei"] == pytest.approx(1.0)
    assert row["ei_std"] == pytest.approx(math.sqrt(2 / 3))
    assert row["ci_std"] == pytest.approx(math.sqrt(((2 - 4 / 3) ** 2 * 2 + (4 / 3) ** 2) / 3))


def test_split_by_user_set_pairs_within_the_set():
    recs = {name: [dict(r, profile={**r["profile"], "user_set": "soft" if i < 6 else "hard"}) for i, r in enumerate(rs)]
            for name, rs in agents().items()}
    rows = compare_rows(recs, by="user_set")
    assert [(r["agent"], r["user_set"], r["n"]) for r in rows] == [("A", "hard", 4), ("B", "hard", 4),
                                                                    ("A", "soft", 6), ("B", "soft", 6)]
    soft_b = rows[3]["paired_vs_first"]
    assert (soft_b["better"], soft_b["worse"]) == (2, 1)     # calls 4, 5 vs call 0
    assert rows[3]["cr"] == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="user_set"):
        compare_rows(recs, by="state")


def test_files_have_the_contract(tmp_path):
    rows = compare_rows(agents())
    paths = write_compare(rows, tmp_path / "cmp", "A vs B")
    assert [p.name for p in paths] == ["compare.json", "compare.md", "compare.png"]
    loaded = json.loads(paths[0].read_text())
    assert [r["agent"] for r in loaded] == ["A", "B"]
    for r in loaded:
        assert set(ROW_KEYS) <= set(r)
    assert set(ROW_KEYS) >= {"agent", "n", "cr", "cr_low", "cr_high", "att", "upa", "ei", "ti", "ci", "errors"}
    md = paths[1].read_text()
    assert "0.400 [0.168, 0.687]" in md and "5/1 of 10, p 0.109 / 0.984" in md and "(reference)" in md
    png = paths[2].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_labels_and_folders():
    assert agent_labels(["x", "runs/a", "x"]) == ["x", "runs/a", "x#2"]
    assert agent_dir_name(0, "embedded:smollm2-135m-instruct") == "0-embedded_smollm2-135m-instruct"
    assert agent_dir_name(2, "/abs/runs/long/") == "2-abs_runs_long"


def test_cost_per_thousand_calls_from_the_turns_token_counts():
    from sead_ray.core.config import load_config
    records = agents()
    for r in records["B"]:   # 100 prompt + 20 completion tokens per turn
        for t in r["turns"]:
            t["agent_prompt_tokens"], t["agent_tokens"] = 100, 20
    cfg = load_config(None, ["cost.usd_per_mtok_in={B: 2.5}", "cost.usd_per_mtok_out={B: 10.0}"])
    assert cfg.cost.price("B") == (2.5, 10.0) and cfg.cost.price("A") is None
    rows = compare_rows(records, prices={"B": cfg.cost.price("B")})
    b_turns = sum(len(r["turns"]) for r in records["B"])
    assert rows[0]["cost_per_1k_calls"] is None
    assert rows[1]["prompt_tokens_per_call"] == 100 * b_turns / 10
    # per call: turns x (100 x 2.5 + 20 x 10) / 1e6 USD; x 1000 calls
    assert rows[1]["cost_per_1k_calls"] == pytest.approx(1000 * b_turns / 10 * (100 * 2.5 + 20 * 10) / 1e6)


def test_prices_must_not_be_negative():
    from sead_ray.core.config import ConfigError, load_config
    with pytest.raises(ConfigError, match="cost.usd_per_mtok_out"):
        load_config(None, ["cost.usd_per_mtok_out={gpt-4o: -1}"])
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(None, ["cost.usd_per_mtok_in=3"])
