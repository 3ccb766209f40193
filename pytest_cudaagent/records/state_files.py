"""State files that a kill leaves either whole or recognisably broken: JSON lines appended in one
write and fsynced, read back skipping (and naming) a line cut short; whole files written to a
temporary name and renamed into place."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"


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
    # Split on newlines only: str.splitlines would also cut at U+2028 and the like inside a value.
    for number, raw in enumerate(lines.path.read_bytes().split(b"\n"), start=1):
        line = raw.decode(errors="replace")
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


def write_atomically(path: str | Path, text: str) -> None:
    """`path` holds the old content or the new, never part of it; a kill leaves at most
    `<path>.tmp-<pid>`, which no reader looks at (remove_leftovers clears them)."""
    path = Path(path)
    temporary = path.with_name(f"{path.name}{TEMPORARY_SUFFIX}-{os.getpid()}")
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def remove_leftovers(directory: str | Path) -> list[Path]:
    """Deletes the temporary files that killed writers left in `directory`; returns them."""
    leftovers = sorted(Path(directory).glob(f"*{TEMPORARY_SUFFIX}-*"))
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)
    return leftovers
