"""Tolerant JSON extraction from model output: fenced blocks, prose around the object, a missing
closing brace or quote. Never raises; returns None when nothing usable is found.

Model output is untrusted input: only the first `MAX_CHARS` characters are looked at, objects are
found in one pass over the text (time linear in its length), and whatever json refuses (huge
integers, deep nesting) simply does not count as an object.
"""
from __future__ import annotations

import json
from typing import Optional

MAX_CHARS = 20_000        # far above any reply a max_tokens budget allows
MAX_CANDIDATES = 8        # objects tried per text (the first that parses wins)


def _top_level_spans(text: str) -> list[tuple[int, int, bool]]:
    """(start, end, closed) of each outermost `{...}` in one string-aware pass; an object cut off at the
    end of the text is returned with closed=False."""
    spans, depth, start, in_str, esc = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = depth > 0
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1, True))
    if depth > 0:
        spans.append((start, len(text), False))
    return spans


def _candidates(text: str):
    for start, end, closed in _top_level_spans(text)[:MAX_CANDIDATES]:
        span = text[start:end]
        if closed:
            yield span
            continue
        # Cut off: close what is open, so `{"reply": "hi` still yields its reply.
        if not any(ch.isalnum() for ch in span):
            continue
        depth, in_str, esc = 0, False, False
        for ch in span:
            if in_str:
                esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
        yield span + ('"' if in_str else "") + "}" * max(depth, 1)


def extract_json_object(text: str) -> Optional[dict]:
    """The first JSON object in `text` that parses, or None (also for an object inside a larger one
    that does not parse: its content is retried once, one level down)."""
    if not isinstance(text, str):
        return None
    text = text[:MAX_CHARS]
    for candidate in _candidates(text):
        obj = _loads(candidate)
        if isinstance(obj, dict):
            return obj
        inner = _candidates(candidate[1:-1]) if obj is None else ()
        for nested in inner:
            obj = _loads(nested)
            if isinstance(obj, dict):
                return obj
    return None


def _loads(candidate: str):
    try:
        return json.loads(candidate)
    except (ValueError, RecursionError):   # malformed, > 4,300-digit integers, deep nesting
        return None
