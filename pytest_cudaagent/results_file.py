"""Results as JSONL: one Result per line, appended as each evaluation finishes, so an interrupted
batch loses nothing and can resume. Safe to append from several processes at once.

A kill can still cut the last line short (SIGKILL during a write stops it between pages); readers
skip such a line, say which it was (state_files), and resume evaluates that pair again."""

from __future__ import annotations

from pathlib import Path

from .locks import file_lock
from .result import Result
from .state_files import JsonLines, read_json_lines, write_line


def append_result(path: str | Path, result: Result) -> None:
    append_json_line(path, result.to_json())


def append_json_line(path: str | Path, line: str) -> None:
    """Appends one JSON line under a lock file, so that xdist workers never interleave lines."""
    path = Path(path)
    with file_lock(path.with_name(path.name + ".lock")):
        write_line(path, line)


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
