"""The paper's metrics (Table 1), computed from dialogue records exactly as SEAD_REFERENCE.md defines:

- CR: share of dialogues ended by the simulator with a success status (accept).
- ATT: mean (and population std) of agent turns over successful dialogues only; null if none.

A call that started deeper (the honest script played its first turns: `turns[].scripted`) counts only the policy's
own turns: ATT, UPA and parse failures over them, EI / TI / CI from the state the policy took over at.
- UPA = 1 - mean over dimensions of MAE_d / max_level_d, pooled over every agent turn that gave an
  estimate; the estimate of turn t is compared with the user state the agent last saw (turn t-1's
  state, the profile's initial state for t = 1).
- EI / TI / CI: mean over dialogues of (final - initial) simulator emotion / trust / cooperation,
  from the simulator's states (never the agent's predictions).
- Cost: accelerator-seconds per 1,000 dialogues, when the records carry `timing.accel_s` (each
  dialogue's share of the devices' wall time, written by the driver); for self-hosted models this
  replaces the API price, never a fake zero.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from sead_ray.core.jsonl import read_jsonl
from sead_ray.scenario.profiles import parse_start_key, start_key
from sead_ray.scenario.state import StateSchema
from sead_ray.scenario.turn_protocol import concern_of

DEFAULT_DIMENSIONS = (("cooperation", 4), ("emotion", 3), ("trust", 5))
OUTCOMES = ("success", "failure")
END_REASONS = ("accept", "refuse", "hangup", "timeout", "error")
STATUSES = ("continue", "accept", "refuse", "hangup")


class DialogueFileError(ValueError):
    """A dialogues file is malformed; the message names the file and the line."""


def dimensions_of(schema: Optional[StateSchema]) -> tuple[tuple[str, int], ...]:
    return DEFAULT_DIMENSIONS if schema is None else tuple(zip(schema.names, schema.max_levels))


def _validate(record: object, dims: Sequence[tuple[str, int]]) -> Optional[str]:
    """What is wrong with one dialogue record, or None."""
    if not isinstance(record, dict):
        return "a dialogue must be a JSON object"
    profile = record.get("profile")
    if not isinstance(profile, dict):
        return "missing object 'profile'"
    for name, hi in dims:
        v = profile.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= hi:
            return f"profile.{name} must be an integer in 0..{hi}, got {v!r}"
    if record.get("outcome") not in OUTCOMES:
        return f"'outcome' must be one of {list(OUTCOMES)}, got {record.get('outcome')!r}"
    if record.get("end_reason") not in END_REASONS:
        return f"'end_reason' must be one of {list(END_REASONS)}, got {record.get('end_reason')!r}"
    turns = record.get("turns")
    if not isinstance(turns, list):
        return "'turns' must be a list"
    for i, t in enumerate(turns):
        if not isinstance(t, dict):
            return f"turns[{i}] must be an object"
        if not isinstance(t.get("agent"), str):
            return f"turns[{i}].agent must be a string"
        for key in ("agent_estimate", "user_state"):
            s = t.get(key)
            if s is None:
                continue
            if not isinstance(s, dict):
                return f"turns[{i}].{key} must be an object or null"
            for name, _ in dims:
                v = s.get(name)
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                    return f"turns[{i}].{key}.{name} must be a finite number, got {v!r}"
        if t.get("user_status", "continue") not in STATUSES:
            return f"turns[{i}].user_status must be one of {list(STATUSES)}"
    for key in ("user_parse_failures", "agent_tokens"):
        v = record.get(key)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)):
            return f"'{key}' must be a count, got {v!r}"
    timing = record.get("timing")
    accel = timing.get("accel_s") if isinstance(timing, dict) else None
    if isinstance(accel, float) and not math.isfinite(accel):
        return f"timing.accel_s must be a finite number, got {accel!r}"
    return None


def read_dialogues(path: str | Path, schema: Optional[StateSchema] = None) -> list[dict]:
    """Read a dialogues JSONL file; raises DialogueFileError naming the line of the first bad record
    (NaN and Infinity included: the metrics of such a record are not numbers)."""
    dims = dimensions_of(schema)
    records = []
    for lineno, record in read_jsonl(path, DialogueFileError, "dialogues", allow_nan=False):
        problem = _validate(record, dims)
        if problem:
            raise DialogueFileError(f"{path}:{lineno}: {problem}")
        records.append(record)
    return records


@dataclass
class DialogueMetrics:
    n: int
    cr: Optional[float]
    att: Optional[float]
    att_std: Optional[float]
    upa: Optional[float]
    ei: Optional[float]
    ti: Optional[float]
    ci: Optional[float]
    successes: int = 0
    estimates: int = 0
    agent_parse_failures: int = 0
    user_parse_failures: int = 0
    end_reasons: Optional[dict] = None
    agent_tokens: int = 0
    accel_seconds_per_1k: Optional[float] = None
    # the share of policy turns after a voiced concern that answered it (the rule user's verdicts; None without)
    answer_rate: Optional[float] = None
    concern_turns: int = 0
    # UPA of the constant guess of every scale's middle, on the same turns: what an agent that does not read the
    # user scores
    upa_middle_guess: Optional[float] = None

    def headline(self) -> dict:
        """The `sead-ray metrics --json` object."""
        return {k: getattr(self, k) for k in ("n", "cr", "att", "att_std", "upa", "ei", "ti", "ci")}

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _mean(xs: Sequence[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def mean_std(xs: Sequence[float]) -> tuple[Optional[float], Optional[float]]:
    """Mean and population std (ATT's std), or (None, None) without data."""
    m = _mean(xs)
    return (None, None) if m is None else (m, math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs)))


def policy_turns(record: Mapping) -> list[Mapping]:
    """The turns the policy generated (a scripted start's are not the policy's)."""
    return [t for t in record["turns"] if not t.get("scripted")]


def estimate_pairs(record: Mapping, dims: Sequence[tuple[str, int]]) -> tuple[list[tuple[Mapping, dict]], dict, dict]:
    """(estimate, the simulator state the agent last saw) for each policy turn that gave an estimate, the pairs
    UPA is scored on; the simulator's state when the policy took over (the profile's, or after a scripted start)
    and its final state (the one before if it never reported)."""
    seen = {name: record["profile"][name] for name, _ in dims}
    start = seen
    pairs = []
    for t in record["turns"]:
        if t.get("agent_estimate") is not None and not t.get("scripted"):
            pairs.append((t["agent_estimate"], seen))
        if t.get("user_state") is not None:
            seen = {name: t["user_state"][name] for name, _ in dims}
        if t.get("scripted"):
            start = seen
    return pairs, start, seen


def compute_metrics(records: Iterable[Mapping], schema: Optional[StateSchema] = None) -> DialogueMetrics:
    """All metrics of a list of dialogue records (the dialogues-file format)."""
    dims = dimensions_of(schema)
    records = list(records)
    n = len(records)
    success_turns = [len(policy_turns(r)) for r in records if r["outcome"] == "success"]
    abs_err = {name: [] for name, _ in dims}
    middle_err = {name: [] for name, _ in dims}
    deltas = {name: [] for name, _ in dims}
    end_reasons = {reason: 0 for reason in END_REASONS}
    agent_fail = user_fail = tokens = 0
    engine_seconds = 0.0
    timed = 0
    for r in records:
        end_reasons[r["end_reason"]] += 1
        pairs, start, final = estimate_pairs(r, dims)
        for est, seen in pairs:
            for name, hi in dims:
                abs_err[name].append(abs(float(est[name]) - seen[name]))
                middle_err[name].append(abs(hi // 2 - seen[name]))
        agent_fail += sum("agent_parse_ok" in t and not t["agent_parse_ok"] for t in policy_turns(r))
        for name, _ in dims:
            deltas[name].append(final[name] - start[name])
        user_fail += int(r.get("user_parse_failures", 0) or 0)
        tokens += int(r.get("agent_tokens", 0) or 0)
        timing = r.get("timing")
        if isinstance(timing, dict) and isinstance(timing.get("accel_s"), (int, float)):
            engine_seconds += float(timing["accel_s"])
            timed += 1
    n_est = len(abs_err[dims[0][0]])
    upa = upa_middle = None
    if n_est:
        upa = 1.0 - sum(_mean(abs_err[name]) / hi for name, hi in dims) / len(dims)
        upa_middle = 1.0 - sum(_mean(middle_err[name]) / hi for name, hi in dims) / len(dims)
    answered, concern_turns = answers(records)
    att, att_std = mean_std(success_turns)
    by_name = {name: _mean(deltas[name]) for name, _ in dims}
    return DialogueMetrics(
        n=n, cr=(len(success_turns) / n) if n else None, att=att, att_std=att_std, upa=upa,
        ei=by_name.get("emotion"), ti=by_name.get("trust"), ci=by_name.get("cooperation"),
        successes=len(success_turns), estimates=n_est, agent_parse_failures=agent_fail,
        user_parse_failures=user_fail, end_reasons=end_reasons, agent_tokens=tokens,
        accel_seconds_per_1k=(1000.0 * engine_seconds / timed) if timed else None,
        answer_rate=answered / concern_turns if concern_turns else None, concern_turns=concern_turns,
        upa_middle_guess=upa_middle,
    )


def answers(records: Iterable[Mapping]) -> tuple[int, int]:
    """(policy turns that answered the concern the user had voiced, policy turns after a voiced concern), from the
    rule user's agenda recorded with each turn: what it had asked (`asked`), and whether that concern is resolved
    after the turn (a user never asks a resolved concern again, so the turn resolved it)."""
    answered = asked = 0
    for r in records:
        for t in policy_turns(r):
            agenda, heard = t.get("user_agenda"), (t.get("user_heard") or [{}])[0]
            question = (agenda or heard).get("asked")   # records written before the typed agenda kept it in heard
            concern = concern_of(question)
            if concern is not None:
                asked += 1
                answered += concern in agenda["resolved"] if agenda else \
                    "answered" in str(heard.get("verdict", "")).split(", ")
    return answered, asked


def start_of_record(record: Mapping) -> str:
    """Where the call started: 'cold' or 'dK' (the profile's start_depth, sead_ray.play.starts)."""
    return start_key(record.get("profile", {}).get("start_depth"))


def completion_by_start(records: Iterable[Mapping]) -> dict[str, dict]:
    """CR and count per start ('cold', 'd0', 'd1', ...); empty when every call was cold (the paper's calls)."""
    by_start: dict[str, list[int]] = {}
    for r in records:
        counts = by_start.setdefault(start_of_record(r), [0, 0])
        counts[0] += r.get("outcome") == "success"
        counts[1] += 1
    if set(by_start) <= {"cold"}:
        return {}
    return {start: {"cr": k / n, "n": n} for start, (k, n) in sorted(by_start.items(), key=lambda kv: start_order(kv[0]))}


def start_order(start: str) -> float:
    """Sorts starts from the ask back to the cold call: d0, d1, ..., cold."""
    depth = parse_start_key(start)
    return math.inf if depth is None else depth


def _fmt(x: Optional[float], digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_table(m: DialogueMetrics, title: str = "SEAD metrics", extra: Optional[Mapping[str, str]] = None) -> str:
    """A plain-text metrics table for terminals and logs."""
    rows = [
        ("dialogues", str(m.n)),
        ("CR (completion rate)", "-" if m.cr is None else f"{100 * m.cr:.1f} % ({m.successes}/{m.n})"),
        ("ATT (turns, successes)", "-" if m.att is None else f"{m.att:.2f} +- {m.att_std:.2f}"),
        ("UPA (state estimates)", f"{_fmt(m.upa)} ({m.estimates} estimates; the constant middle guess "
                                  f"{_fmt(m.upa_middle_guess)})"),
        ("answer rate (voiced concerns)", "-" if m.answer_rate is None
         else f"{m.answer_rate:.2f} ({m.concern_turns} turns after a concern)"),
        ("EI / TI / CI", f"{_fmt(m.ei, 2)} / {_fmt(m.ti, 2)} / {_fmt(m.ci, 2)}"),
        ("parse failures agent/user", f"{m.agent_parse_failures} / {m.user_parse_failures}"),
        ("end reasons", ", ".join(f"{k} {v}" for k, v in (m.end_reasons or {}).items() if v) or "-"),
    ]
    if m.accel_seconds_per_1k is not None:
        rows.append(("accelerator-s / 1k dialogues", f"{m.accel_seconds_per_1k:.1f}"))
    rows += list((extra or {}).items())
    width = max(len(k) for k, _ in rows)
    lines = [title, "-" * (width + 30)] + [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)
