"""What the dialogue browser keeps of each call of a dialogues file: a compact summary (a named tuple of
shared strings, a few hundred bytes a call, so the index of a multi-GB file stays a fraction of it), the
filters over it, and a profile's identity across iterations and runs."""
from __future__ import annotations

import hashlib
import sys
from typing import Any, NamedTuple, Optional

from sead_ray.scenario.state import state_key
from sead_ray.scenario.turn_protocol import agenda_gain

_SHARED: dict[tuple, tuple] = {}   # identical behaviour lists share one tuple


class CallSummary(NamedTuple):
    iteration: Optional[int]
    state: Optional[str]          # the initial state's key, '2-1-3'
    profile: str                  # profile_key(): initial state, behaviours, user set (hashed)
    behaviors: tuple[str, ...]
    user_set: Optional[str]
    outcome: Optional[str]
    end_reason: Optional[str]
    error: bool
    turns: int
    tokens: Optional[int]
    format_failures: int
    agenda_gain: Optional[float] = None   # what the milestones reward reads (turn_protocol.agenda_gain)
    policy_chars: Optional[int] = None    # what the planted_brevity reward reads: the policy's raw text, in characters

    def to_json(self) -> dict:
        return {**self._asdict(), "behaviors": list(self.behaviors)}

    @property
    def success(self) -> bool:   # what a reward reads (sead_ray.training.rewards.CallOutcome)
        return self.outcome == "success"

    @property
    def agent_parse_failures(self) -> int:
        return self.format_failures



def _text(value: Any) -> Optional[str]:
    return sys.intern(value) if isinstance(value, str) else None


def profile_key(profile: dict, names: tuple[str, ...]) -> str:
    """A profile's identity across iterations and runs (initial state, behaviours, user set), as a short hash."""
    behaviors = "|".join(sorted(b for b in profile.get("behaviors") or [] if isinstance(b, str)))
    text = f"{state_of(profile, names)}/{behaviors}/{profile.get('user_set') or ''}"
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def state_of(values: dict, names: tuple[str, ...]) -> Optional[str]:
    levels = [values.get(n) for n in names]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in levels):
        return None
    return sys.intern(state_key(levels))


def summarizer(names: tuple[str, ...]):
    """record -> CallSummary, or None for a JSON value that is not a dialogue record."""
    def summarize(record: Any) -> Optional[CallSummary]:
        if not isinstance(record, dict) or not isinstance(record.get("profile"), dict):
            return None
        profile, turns = record["profile"], record.get("turns")
        turns = turns if isinstance(turns, list) else []
        failures = record.get("agent_parse_failures")
        if not isinstance(failures, int):
            failures = sum(isinstance(t, dict) and t.get("agent_parse_ok") is False for t in turns)
        behaviors = tuple(sys.intern(b) for b in profile.get("behaviors") or [] if isinstance(b, str))
        if len(_SHARED) < 100_000:
            behaviors = _SHARED.setdefault(behaviors, behaviors)
        tokens = record.get("agent_tokens")
        iteration = record.get("iteration")
        return CallSummary(iteration if isinstance(iteration, int) else None, state_of(profile, names),
                           sys.intern(profile_key(profile, names)), behaviors, _text(profile.get("user_set")),
                           _text(record.get("outcome")), _text(record.get("end_reason")),
                           record.get("end_reason") == "error" or bool(record.get("error")), len(turns),
                           tokens if isinstance(tokens, int) else None, failures,
                           agenda_gain([t for t in turns if isinstance(t, dict)]),
                           sum(len(t.get("agent_raw") or "") for t in turns if isinstance(t, dict)
                               and not t.get("scripted")))
    return summarize


def matches(s: CallSummary, band: Optional[str], filters: dict) -> bool:
    """Every filter given (a key of FILTERS with a non-empty value) holds."""
    for key, want in filters.items():
        if want in (None, ""):
            continue
        if key == "band":
            ok = band == want
        elif key == "behavior":
            ok = want in s.behaviors
        elif key == "format":
            ok = (s.format_failures > 0) == (want == "yes")
        elif key == "error":
            ok = s.error == (want == "yes")
        elif key == "user_set":
            ok = (s.user_set or "") == want
        else:   # outcome, end_reason, state, profile
            ok = getattr(s, key) == want
        if not ok:
            return False
    return True


FILTERS = ("outcome", "end_reason", "band", "user_set", "behavior", "format", "error", "state", "profile")
