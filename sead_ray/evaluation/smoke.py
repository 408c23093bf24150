"""The verdict of a smoke run (configs/smoke_*.yaml; `python benchmarks/smoke_check.py RUN`): did the weight path
carry the trained weights to the engines, as the engines use them? A smoke run trains 2 iterations under a planted
preference (train.reward = planted_brevity), so that the first GRPO step must change the weights. It passes only if
  step      iteration 1 took a step (not skipped, a gradient) and published version 1
  digests   every sync was verified and the engines' digests equalled the trainer's (weight_sync.verify)
  versions  every call of iteration 2 was played by version 1, every turn of it
  logprobs  iteration 2's trainer logprobs, computed with version 1, agree with the engine's within the tolerance
            (a sync whose bytes arrived but that the engine does not use, e.g. a stale packed copy, fails here)
Pure: reads the run's metrics rows and dialogue records."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

# mean |engine logprob - trainer logprob| per token accepted, by training dtype: bf16's rounding between two
# kernels is ~1e-2; fp32 agrees to ~1e-5 (CPU runs measure ~2e-6)
MISMATCH_TOLERANCE = {"bfloat16": 0.05, "float16": 0.02, "float32": 1e-3}


@dataclass
class SmokeCheck:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name:<9} {self.detail}"


def _train_row(rows: list[dict], iteration: int) -> Optional[dict]:
    return next((r for r in rows if r.get("phase") == "train" and r.get("iteration") == iteration), None)


def smoke_checks(rows: list[dict], iteration_2_calls: list[dict], tolerance: float) -> list[SmokeCheck]:
    """The four checks from metrics.jsonl's rows and dialogues/iter_0002.jsonl's records."""
    first, second = _train_row(rows, 1), _train_row(rows, 2)
    if first is None or second is None:
        missing = [str(i) for i, r in ((1, first), (2, second)) if r is None]
        return [SmokeCheck("run", False, f"no train row of iteration {' and '.join(missing)} in metrics.jsonl: "
                                         "the run did not finish its 2 iterations")]
    checks = []
    grad = first.get("train_grad_norm") or 0.0
    stepped = not first.get("train_skipped") and grad > 0 and first.get("policy_version") == 1
    checks.append(SmokeCheck("step", stepped, f"iteration 1: grad norm {grad:.3g}, skipped {first.get('train_skipped')}, "
                                              f"published version {first.get('policy_version')}"))
    verified = [r.get("sync_verified") for r in (first, second)]
    checks.append(SmokeCheck("digests", all(v is True for v in verified),
                             f"syncs of iterations 1, 2 verified: {verified} (True: the engines' digests equal the "
                             "trainer's)"))
    versions = sorted({v for call in iteration_2_calls for v in call.get("policy_versions") or [None]}, key=str)
    checks.append(SmokeCheck("versions", bool(iteration_2_calls) and versions == [1],
                             f"{len(iteration_2_calls)} calls of iteration 2 played by version(s) {versions}"))
    mismatch = second.get("train_logprob_mismatch_mean")
    checks.append(SmokeCheck("logprobs", mismatch is not None and mismatch <= tolerance,
                             f"iteration 2: mean |engine - trainer| logprob {_num(mismatch)} per token (max "
                             f"{_num(second.get('train_logprob_mismatch_max'))}), tolerance {tolerance:g}"))
    return checks


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"
