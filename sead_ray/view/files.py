"""The viewed folder: every path confined to it, what it holds, and JSON Lines files read by byte offset.

A dialogues file can be gigabytes: `LineIndex` scans it once in 1 MB chunks, keeping the byte offset of
each complete line and a small summary of its record, and reads a whole record again only when the page
asks for it. It extends itself as the file grows (a run writing), starts over when the file was replaced,
and counts a line that is not JSON (torn by a killed writer) instead of failing the file.
"""
from __future__ import annotations

import json
import os
import threading
from array import array
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, Optional

# folders that hold no run, comparison or dialogues file (and can be large): never scanned
SKIP_DIRS = {"checkpoints", "tensorboard", "ray_train", "curriculum", "report", "__pycache__", ".git", "node_modules"}
SCAN_DEPTH = 4
CHUNK = 1 << 20
MAX_LINE = 64 << 20   # a longer line is counted as torn and skipped, never held in memory


class ViewError(Exception):
    """A request the viewer refuses or cannot serve; `status` is its HTTP status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class LineIndex:
    """Offsets and summaries of the JSON lines of one file; `summarize(value)` returns None for a value
    that is JSON but not the expected record (counted as malformed)."""

    def __init__(self, path: Path, summarize: Callable[[Any], Any]):
        self.path, self.summarize = path, summarize
        self.lock = threading.Lock()
        self._reset(None)

    def _reset(self, identity: Optional[tuple]) -> None:
        self.identity = identity
        self.offsets = array("q")
        self.linenos = array("l")
        self.summaries: list[Any] = []
        self.torn: list[int] = []        # line numbers that are not JSON
        self.malformed: list[int] = []   # JSON, but not a record of this kind
        self.end = 0                     # bytes indexed (up to the last complete line)
        self.lines = 0
        self.pending = False             # a last line without its newline yet (being written, or torn)

    def refresh(self) -> LineIndex:
        with self.lock:
            try:
                st = os.stat(self.path)
            except OSError as exc:
                raise ViewError(f"{self.path.name}: cannot read ({exc.strerror})", 404) from None
            identity = (st.st_dev, st.st_ino)
            if identity != self.identity or st.st_size < self.end:
                self._reset(identity)   # replaced (written whole, atomically) or truncated: index again
            if st.st_size > self.end:
                self._scan()
        return self

    def _scan(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.end)
            pos, buf, skipping = self.end, b"", False
            while chunk := f.read(CHUNK):
                buf += chunk
                start = 0
                while (nl := buf.find(b"\n", start)) >= 0:
                    if skipping:
                        skipping = False
                    else:
                        self._add(pos + start, buf[start:nl])
                    start = nl + 1
                pos, buf = pos + start, buf[start:]
                if len(buf) > MAX_LINE and not skipping:   # one giant line: count it, drop what was read
                    self.lines += 1
                    self.torn.append(self.lines)
                    skipping = True
                if skipping:
                    pos, buf = pos + len(buf), b""
        self.end = pos
        self.pending = bool(buf.strip()) or skipping

    def _add(self, offset: int, line: bytes) -> None:
        self.lines += 1
        if not line.strip():
            return
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            self.torn.append(self.lines)
            return
        summary = self.summarize(value)
        if summary is None:
            self.malformed.append(self.lines)
            return
        self.offsets.append(offset)
        self.linenos.append(self.lines)
        self.summaries.append(summary)

    def __len__(self) -> int:
        return len(self.summaries)

    def record(self, i: int) -> Any:
        """The whole value of the i-th good line (read from its offset)."""
        if not 0 <= i < len(self.offsets):
            raise ViewError(f"{self.path.name}: no record {i} (it holds {len(self.offsets)})", 404)
        with open(self.path, "rb") as f:
            f.seek(self.offsets[i])
            return json.loads(f.readline(MAX_LINE))

    def problems(self) -> dict:
        return {"torn_lines": self.torn[:20], "torn": len(self.torn), "malformed_lines": self.malformed[:20],
                "malformed": len(self.malformed), "incomplete_last_line": self.pending}


class Folder:
    """The folder `sead-ray view` was given; every path a request names is resolved inside it."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self._indexes: dict[tuple[Path, str], LineIndex] = {}
        self._lock = threading.Lock()

    def path(self, rel: Optional[str], must_exist: bool = True) -> Path:
        """`rel` (a path relative to the folder, '/' separated) as an absolute path inside the folder;
        403 for an absolute path, a '..' or a link leading out, 404 for a missing one."""
        if rel is None or "\x00" in rel or "\\" in rel:
            raise ViewError(f"path {rel!r}: expected a path relative to the viewed folder", 400)
        if rel in ("", "."):
            return self.root
        parts = PurePosixPath(rel)
        if parts.is_absolute() or ".." in parts.parts:
            raise ViewError(f"path {rel!r}: outside the viewed folder (absolute paths and '..' are refused)", 403)
        full = (self.root / parts).resolve()
        if not full.is_relative_to(self.root):
            raise ViewError(f"path {rel!r}: leads outside the viewed folder (a link out of it)", 403)
        if must_exist and not full.exists():
            raise ViewError(f"path {rel!r}: no such file or folder in the viewed folder", 404)
        return full

    def rel(self, path: Path) -> str:
        text = path.resolve().relative_to(self.root).as_posix()
        return text if text != "." else ""

    def index(self, path: Path, kind: str, summarize: Callable[[Any], Any]) -> LineIndex:
        """The (cached, refreshed) line index of a file inside the folder; `kind` names the summarizer."""
        with self._lock:
            index = self._indexes.get((path, kind))
            if index is None:
                index = self._indexes[(path, kind)] = LineIndex(path, summarize)
        return index.refresh()

    def discover(self) -> dict:
        """Runs (config.yaml with metrics.jsonl, dialogues/, checkpoints/ or a live run's .lock), comparisons
        (compare.json), evaluations (dialogues.jsonl) and saved talks (talks/*.jsonl), at most SCAN_DEPTH
        folders down, links not followed."""
        found: dict[str, list] = {"runs": [], "compares": [], "evals": [], "talks": []}

        def visit(folder: Path, depth: int) -> None:
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                return
            names = {e.name for e in entries}
            rel = self.rel(folder)
            if "config.yaml" in names and names & {"metrics.jsonl", "dialogues", "checkpoints", ".lock"}:
                found["runs"].append(rel)
            elif "dialogues.jsonl" in names:
                found["evals"].append(rel)
            if "compare.json" in names:
                found["compares"].append(rel)
            if folder.name == "talks":
                found["talks"] += [self.rel(Path(e.path)) for e in entries if e.name.endswith(".jsonl") and e.is_file()]
            if depth >= SCAN_DEPTH:
                return
            for e in entries:
                if e.is_dir(follow_symlinks=False) and e.name not in SKIP_DIRS and not e.name.startswith("."):
                    visit(Path(e.path), depth + 1)
        visit(self.root, 0)
        return found

    def dialogue_files(self, source: str) -> list[str]:
        """The dialogues files of a run (dialogues/*.jsonl), an evaluation or a talks folder."""
        folder = self.path(source) if source else self.root
        if folder.is_file():
            return [self.rel(folder)]
        files = sorted((folder / "dialogues").glob("*.jsonl")) + sorted(folder.glob("dialogues.jsonl"))
        return [self.rel(f) for f in files if f.resolve().is_relative_to(self.root)]

    def source_of(self, file: Path) -> Optional[Path]:
        """The run or evaluation folder a dialogues file belongs to (the folder holding config.yaml)."""
        for folder in (file.parent, file.parent.parent):
            if folder.is_relative_to(self.root) and (folder / "config.yaml").exists():
                return folder
        return None


def read_json_file(path: Path, what: str) -> Any:
    """A small JSON file (curriculum, compare table); errors name the file."""
    try:
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise ViewError(f"{path.name}: cannot read {what} ({exc.strerror})", 404) from None
    except ValueError as exc:
        raise ViewError(f"{path.name}: not valid JSON ({exc})", 422) from None
