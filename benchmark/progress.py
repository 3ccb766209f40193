"""Follows a batch run by reading its results JSONL as it grows: a rich progress bar with the
count of each status, and one line per finished candidate."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pytest_cudaagent.core.result import Result
from pytest_cudaagent.timing.waits import waiting_lines

STATUS_COLOURS = {"passed": "green", "incorrect": "red", "build_error": "magenta", "runtime_error": "red",
                  "timeout": "yellow", "crashed": "red", "violation": "bright_red",
                  "nondeterministic_reference": "yellow", "problem_error": "yellow", "harness_error": "bright_magenta"}


class ResultsTail:
    """New complete lines of a JSONL file since `offset`; a half-written line waits."""

    def __init__(self, path: Path, offset: int):
        self.path = Path(path)
        self.offset = offset

    def poll(self) -> list[Result]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        results = []
        for line in complete.decode(errors="replace").splitlines():
            try:
                results.append(Result.from_json(line))
            except (ValueError, TypeError, KeyError):
                continue
        return results


def status_counts(counts: Counter) -> str:
    return "  ".join(f"[{STATUS_COLOURS.get(status, 'white')}]{status} {count}[/]"
                     for status, count in sorted(counts.items()))


def follow(process: subprocess.Popen, tail: ResultsTail, total: int, console: Console,
           poll_s: float = 0.5, status_dir: Path | None = None) -> list[Result]:
    """Until `process` ends: show progress over `total` pairs, and what its evaluations wait for
    (their notes in `status_dir`, waits.py); returns the Results it wrote."""
    finished: list[Result] = []
    counts: Counter = Counter()
    columns = (TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("", total=total)
        while True:
            running = process.poll() is None
            for result in tail.poll():
                finished.append(result)
                counts[result.status] += 1
                colour = STATUS_COLOURS.get(result.status, "white")
                detail = _speed(result) if result.passed else (result.error or "").split("\n")[0][:100]
                # File names and error text are printed as they are, never read as rich markup.
                bar.console.print(f"[{colour}]{result.status:<13}[/] " + escape(
                    f"{Path(result.problem).name} <- {Path(result.candidate).name}  {detail}"), highlight=False)
            waits = waiting_lines(status_dir) if status_dir is not None else []
            bar.update(task, completed=len(finished), description=progress_description(counts, waits))
            if not running:
                return finished
            time.sleep(poll_s)


def progress_description(counts: Counter, waits: list[str]) -> str:
    """The verdicts so far, then the longest wait of the run's evaluations, if any."""
    text = status_counts(counts)
    if waits:
        more = f" (+{len(waits) - 1} more)" if len(waits) > 1 else ""
        text += ("  " if text else "") + f"[yellow]{escape(waits[0])}{more}[/]"
    return text


def _speed(result: Result) -> str:
    parts = [f"{value:.2f}x vs {name}" for name, value in
             (("eager", result.speedup_vs_eager), ("compile", result.speedup_vs_compile)) if value is not None]
    return ", ".join(parts)
