"""JSON and JSON Lines files (profiles, dialogues, metrics, curriculum): one reader whose errors name
the file and the line, and writers that never leave a half-written file behind."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
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


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_jsonl(path: str | Path, records: Iterable[Any]) -> None:
    """The whole file, one record a line, replaced atomically (temp file + rename)."""
    _write_atomic(Path(path), "".join(json.dumps(r) + "\n" for r in records))


def write_json(path: str | Path, data: Any) -> None:
    """One JSON document, replaced atomically."""
    _write_atomic(Path(path), json.dumps(data, indent=1))


def append_jsonl(path: str | Path, record: Any) -> None:
    """One line at the end (a single write of a whole line)."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
