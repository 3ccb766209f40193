"""Results as JSONL: one Result per line, appended as each evaluation finishes, so an interrupted
batch loses nothing and can resume. Safe to append from several processes at once."""

from __future__ import annotations

from pathlib import Path

from .locks import file_lock
from .result import Result


def append_result(path: str | Path, result: Result) -> None:
    append_json_line(path, result.to_json())


def append_json_line(path: str | Path, line: str) -> None:
    """Appends one JSON line under a lock file, so that xdist workers never interleave lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_name(path.name + ".lock")):
        with open(path, "a") as handle:
            handle.write(line + "\n")
            handle.flush()


def read_results(path: str | Path) -> list[Result]:
    """Every complete line; a line cut short by an interruption is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    results = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            results.append(Result.from_json(line))
        except (ValueError, TypeError, KeyError):
            continue
    return results


def pair_key(problem: str | Path, candidate: str | Path) -> str:
    return f"{Path(problem).resolve()}::{Path(candidate).resolve()}"


def done_keys(path: str | Path) -> set[str]:
    return {pair_key(result.problem, result.candidate) for result in read_results(path)}
