"""Tolerant JSON extraction from model output: fenced blocks, prose around the object, a missing
closing brace or quote. Never raises; returns None when nothing usable is found."""
from __future__ import annotations

import json
from typing import Optional


def _balanced_candidates(text: str):
    """Yield substrings that start at a '{' and end at its matching '}' (string-aware)."""
    for start in [i for i, ch in enumerate(text) if ch == "{"]:
        depth, in_str, esc = 0, False, False
        for j in range(start, len(text)):
            ch = text[j]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    yield text[start:j + 1]
                    break
        else:
            # Cut off: close what is open, so `{"reply": "hi` still yields its reply.
            tail = text[start:]
            if not any(ch.isalnum() for ch in tail):
                continue
            closers = ('"' if in_str else "") + "}" * max(depth, 1)
            yield tail + closers


def extract_json_object(text: str) -> Optional[dict]:
    """The first JSON object in `text` that parses, or None."""
    if not isinstance(text, str):
        return None
    for candidate in _balanced_candidates(text):
        try:
            obj = json.loads(candidate)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    return None
