"""Results as JSONL: one Result per line, appended as each evaluation finishes, so an interrupted
batch loses nothing and can resume. Safe to append from several processes at once.

A kill can still cut the last line short (SIGKILL during a write stops it between pages); readers
skip such a line, say which it was (state_files), and resume evaluates that pair again. So it does
a pair whose row is a `harness_error` (an error of ours says nothing of the pair); every other
status is done."""

from __future__ import annotations

from pathlib import Path

from ..core.result import Result
from ..timing.locks import file_lock
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


# The status of a row that says nothing of its pair: evaluated again on resume.
REDONE_ON_RESUME = ("harness_error",)


def done_keys(path: str | Path) -> tuple[set[str], str]:
    """The pairs whose last Result in the file is a verdict (any status but REDONE_ON_RESUME), and
    `skipped_message()` for its unreadable lines."""
    results, lines = read_results_file(path)
    last = {pair_key(result.problem, result.candidate): result.status for result in results}
    return {key for key, status in last.items() if status not in REDONE_ON_RESUME}, lines.skipped_message()


def record_missing(path: str | Path, pairs: list[tuple[Path, Path]], since_offset: int, reason: str,
                   device: str) -> list[Result]:
    """A `harness_error` row for each pair with no row in the file past `since_offset` (where the
    run began): its evaluation gave none (the pytest worker running it died). Returns them."""
    path = Path(path)
    seen = set()
    if path.exists():
        with open(path, "rb") as handle:
            handle.seek(since_offset)
            for line in handle.read().decode(errors="replace").splitlines():
                try:
                    record = Result.from_json(line)
                except (ValueError, TypeError, KeyError):
                    continue
                seen.add(pair_key(record.problem, record.candidate))
    missing = []
    for problem, candidate in pairs:
        if pair_key(problem, candidate) not in seen:
            result = Result(str(problem), str(candidate), status="harness_error", device=device,
                            error=f"no Result came back from this pair's evaluation: {reason}; evaluated again on resume")
            append_result(path, result)
            missing.append(result)
    return missing
