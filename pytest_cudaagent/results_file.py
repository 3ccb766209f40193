"""Results as JSONL: one Result per line, appended as each evaluation finishes, so an interrupted
batch loses nothing and can resume. Safe to append from several processes at once.

A kill can still cut the last line short (SIGKILL during a write stops it between pages); readers
skip such a line, say which it was, and resume evaluates that pair again."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .locks import file_lock
from .result import Result


def append_result(path: str | Path, result: Result) -> None:
    append_json_line(path, result.to_json())


def append_json_line(path: str | Path, line: str) -> None:
    """Appends one JSON line under a lock file, so that xdist workers never interleave lines."""
    path = Path(path)
    with file_lock(path.with_name(path.name + ".lock")):
        write_line(path, line)


def write_line(path: str | Path, line: str) -> None:
    """One line in one write(2) on an O_APPEND descriptor, then fsync: a line is on disk whole
    before the caller goes on (a buffered file would split a long line over several writes, and
    a kill between them would leave half a Result). A file left without a final newline by an
    earlier kill gets one first, so the new line is never glued to the broken one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (line + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class JsonLines:
    """The records a JSONL file holds, and the (1-based) numbers of the lines it had to skip."""

    path: Path
    records: list[dict] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)

    def skipped_message(self) -> str:
        """One line saying what was skipped, for the user; empty when nothing was."""
        if not self.skipped:
            return ""
        lines = ", ".join(str(number) for number in self.skipped[:10]) + (" ..." if len(self.skipped) > 10 else "")
        return (f"{self.path}: skipped {len(self.skipped)} unreadable line(s) (line {lines}), most likely cut "
                "short by a killed run; their work is done again on resume")


def read_json_lines(path: str | Path, check=None) -> JsonLines:
    """Every complete JSON object in the file; `check(record)` may raise ValueError, TypeError or
    KeyError to reject a record (it is then counted as skipped too)."""
    lines = JsonLines(Path(path))
    if not lines.path.exists():
        return lines
    for number, line in enumerate(lines.path.read_bytes().decode(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            if check is not None:
                check(record)
        except (ValueError, TypeError, KeyError):
            lines.skipped.append(number)
            continue
        lines.records.append(record)
    return lines


def read_results_file(path: str | Path) -> tuple[list[Result], JsonLines]:
    """The Results, and the file's lines (for `skipped_message`)."""
    results: list[Result] = []
    lines = read_json_lines(path, check=lambda record: results.append(Result.from_dict(record)))
    return results, lines


def read_results(path: str | Path) -> list[Result]:
    """Every complete line; a line cut short by an interruption is skipped."""
    return read_results_file(path)[0]


def pair_key(problem: str | Path, candidate: str | Path) -> str:
    return f"{Path(problem).resolve()}::{Path(candidate).resolve()}"


def done_keys(path: str | Path) -> tuple[set[str], str]:
    """The pairs with a Result in the file, and `skipped_message()` for its unreadable lines."""
    results, lines = read_results_file(path)
    return {pair_key(result.problem, result.candidate) for result in results}, lines.skipped_message()
