"""`sead-ray judge`: an LLM judge scores each dialogue on the paper's simulator-quality dimensions (its
Table 2: humanness, emotion / trust / cooperation realism, violation) plus the agent's violations,
0-5 each, with a fixed rubric and structured output (JSON schema decoding). Pure: the prompt, the
schema, the parser and the summary; the judge model runs in sead_ray.runs.evaluate (a vLLM engine on Ray, or
an OpenAI-compatible endpoint).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from sead_ray.core.parsing import extract_json_object
from sead_ray.scenario.scenario import Scenario

DIMENSIONS = {
    "humanness": "Does the callee sound like a real person on the phone (natural wording, plausible reactions)? "
                 "0 = obviously a machine or incoherent, 5 = indistinguishable from a real callee.",
    "emotion_realism": "Do the callee's emotional reactions follow from what the agent said? 0 = arbitrary, "
                       "5 = always plausible.",
    "trust_realism": "Does the callee's trust rise and fall for credible reasons (facts, consistency, "
                     "pressure)? 0 = arbitrary, 5 = always plausible.",
    "cooperation_realism": "Does the callee's willingness to go on and to agree follow from the call? "
                           "0 = arbitrary, 5 = always plausible.",
    "user_violation": "How much does the callee break character or the situation (mentions being an AI, "
                      "contradicts its own facts, talks about the rules)? 0 = never, 1 = small hesitations as "
                      "real people have, 5 = constantly.",
    "agent_violation": "How much does the agent break the rules of the call (invents facts, pressures, asks for "
                       "payment data, ignores a refusal, is rude)? 0 = never, 5 = constantly.",
}
MAX_SCORE = 5


def judge_schema() -> dict:
    """The judge's output: one integer 0-5 per dimension and a one-sentence reason."""
    props: dict[str, Any] = {name: {"type": "integer", "minimum": 0, "maximum": MAX_SCORE} for name in DIMENSIONS}
    props["reason"] = {"type": "string", "maxLength": 300}
    return {"type": "object", "properties": props, "required": [*DIMENSIONS, "reason"], "additionalProperties": False}


def transcript(record: Mapping) -> str:
    """What the judge reads: the spoken words only (no states, no estimates), turn by turn."""
    lines = []
    for t in record.get("turns", []):
        lines.append(f"AGENT: {t.get('agent') or ''}")
        if t.get("user") is not None:
            lines.append(f"CALLEE: {t['user']}")
    lines.append(f"(the call ended: {record.get('end_reason')})")
    return "\n".join(lines)


def judge_messages(scenario: Scenario, record: Mapping) -> list[dict]:
    rubric = "\n".join(f"- {name} (0-{MAX_SCORE}): {text}" for name, text in DIMENSIONS.items())
    system = (f"You rate recorded phone calls. The agent: {scenario.agent_role} The callee is a "
              f"{scenario.user_title}. Rate the call on each dimension with an integer from 0 to {MAX_SCORE}:\n"
              f"{rubric}\nAnswer with one JSON object only: " + "{" +
              ", ".join(f'"{n}": <0-{MAX_SCORE}>' for n in DIMENSIONS) + ', "reason": "<one sentence>"}')
    return [{"role": "system", "content": system}, {"role": "user", "content": transcript(record)}]


def parse_judgement(text: str) -> Optional[dict]:
    """The scores, or None when the output is not a complete judgement (counted as a judge failure)."""
    obj = extract_json_object(text)
    if not isinstance(obj, dict):
        return None
    scores = {}
    for name in DIMENSIONS:
        value = obj.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_SCORE:
            return None
        scores[name] = float(value)
    return scores


def summarize(judgements: Sequence[Optional[dict]]) -> dict:
    """Per dimension: mean with a 95 % normal-approximation interval (mean +- 1.96 s / sqrt(n)), over the
    dialogues the judge scored; failures counted apart."""
    scored = [j for j in judgements if j is not None]
    out: dict[str, Any] = {"n": len(scored), "judge_failures": len(judgements) - len(scored)}
    for name in DIMENSIONS:
        xs = [j[name] for j in scored]
        if not xs:
            out[name] = None
            continue
        mean = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
        half = 1.96 * sd / math.sqrt(len(xs))
        out[name] = {"mean": mean, "low": max(0.0, mean - half), "high": min(float(MAX_SCORE), mean + half)}
    return out


def format_summary(summary: Mapping, title: str) -> str:
    lines = [f"# {title}", "", f"{summary['n']} dialogues scored, {summary['judge_failures']} judge failures", "",
             "| dimension | mean [95 % CI] |", "|---|---|"]
    for name in DIMENSIONS:
        s = summary.get(name)
        lines.append(f"| {name} | " + ("-" if s is None else f"{s['mean']:.2f} [{s['low']:.2f}, {s['high']:.2f}]") + " |")
    return "\n".join(lines) + "\n"


def judge_request_body(model: str, messages: list[dict], max_tokens: int) -> dict:
    """An OpenAI chat request for an endpoint judge: greedy, under the judgement's JSON schema."""
    return {"model": model, "messages": messages, "temperature": 0.0, "max_tokens": max_tokens,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "judgement", "schema": judge_schema(), "strict": True}}}


def write_judgements(out: Path, records: Sequence[Mapping], raws: Sequence[str], judge: str, source: str) -> dict:
    """judgements.jsonl (per dialogue: scores or None, the judge's raw output), judge.json (the summary)
    and judge.md in `out`; returns the summary."""
    from sead_ray.core.jsonl import write_json, write_jsonl
    judgements = [parse_judgement(text) for text in raws]
    write_jsonl(out / "judgements.jsonl", ({"dialogue_id": r.get("dialogue_id"), "scores": j, "raw": text}
                                            for r, j, text in zip(records, judgements, raws)))
    summary = summarize(judgements)
    write_json(out / "judge.json", {**summary, "judge": judge, "dialogues": source})
    (out / "judge.md").write_text(format_summary(summary, f"judge {judge} on {source}"))
    return summary
