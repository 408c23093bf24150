"""JSON and JSON Lines files (profiles, dialogues, metrics, curriculum): one reader whose errors name
the file and the line, and writers that never leave a half-written file behind."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def read_text(path: str | Path, error: type[Exception] = ValueError, what: str = "file") -> str:
    """The file as UTF-8 text; raises `error` naming `path` when it cannot be read, `path:line` when it
    is not UTF-8."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise error(f"{path}:{line}: cannot read {what}: not UTF-8 text (byte 0x{data[exc.start]:02x} "
                    f"at offset {exc.start})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_jsonl(path: str | Path, error: type[Exception] = ValueError, what: str = "file",
               allow_nan: bool = True) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; raises `error` naming `path:line` at the
    first line that is not JSON (or holds NaN/Infinity unless `allow_nan`), or `path` when the file
    cannot be read."""
    lines = read_text(path, error, what).splitlines()
    extra = {} if allow_nan else {"parse_constant": _no_constant}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line, **extra)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except ValueError as exc:   # NaN / Infinity / -Infinity with allow_nan=False
            raise error(f"{path}:{lineno}: {exc} (use null)") from None
        except RecursionError:
            raise error(f"{path}:{lineno}: JSON nested too deeply") from None
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
    """One line at the end, atomically: the file is rewritten beside and renamed over (a kill mid-write, or
    a network filesystem that splits appends, never leaves a torn line). For small files (metrics rows)."""
    path = Path(path)
    before = path.read_text() if path.exists() else ""
    if before and not before.endswith("\n"):
        before += "\n"   # a torn line from an older writer stays its own line (resume drops it)
    _write_atomic(path, before + json.dumps(record) + "\n")
