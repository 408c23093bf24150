"""JSON Lines input (profiles, dialogues, metrics): errors name the file and the line."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: str | Path, error: type[Exception] = ValueError, what: str = "file") -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; raises `error` naming `path:line` at the
    first line that is not JSON, or `path` when the file cannot be read."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        yield lineno, value
