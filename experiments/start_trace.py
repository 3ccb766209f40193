"""Where a batch's first seconds go: the marks of a run traced with CUDAAGENT_TRACE
(pytest_cudaagent.system.start_trace), as seconds after the bench's own process started.

    CUDAAGENT_TRACE=/tmp/trace.jsonl cudaagent bench ... --no-timing
    python -m experiments.start_trace /tmp/trace.jsonl

Prints one row per xdist worker (when its process started, configured, collected; its zygote's
start, readiness and imports; its first fork asked and done; its first item's start and end), the
median of each column over the workers, and one row per event with its count and the
minimum, median and maximum."""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

# Per xdist worker, the first time of: (column, event, process kind or None for any)
FIRST_OF = (
    ("created", "pytest.configure", "created"),
    ("configure", "pytest.configure", None),
    ("collected", "pytest.collected", None),
    ("zygote", "zygote.start", "created"),
    ("ready", "zygote.ready", None),
    ("dynamo", "zygote.imported", None),
    ("item", "item.start", None),
    ("imported", "evaluation.imported", None),
    ("fork asked", "zygote.fork_asked", None),
    ("forked", "zygote.forked", None),
    ("setup", "worker.setup", None),
    ("item end", "item.end", None),
)


def read_trace(path: Path) -> list[dict]:
    marks = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            marks.append(json.loads(line))
    return marks


def origin(marks: list[dict]) -> float:
    """The bench's process start where it was traced, else the first mark."""
    for mark in marks:
        if mark["event"] == "cli.start" and mark.get("created"):
            return mark["created"]
    return min(mark["t"] for mark in marks)


def per_worker(marks: list[dict], zero: float) -> dict[str, dict[str, float]]:
    """For each xdist worker: the first time of each FIRST_OF column, in seconds after `zero`."""
    rows: dict[str, dict[str, float]] = defaultdict(dict)
    for column, event, field in FIRST_OF:
        for mark in marks:
            worker = mark.get("xdist")
            if worker is None or mark["event"] != event:
                continue
            if event == "zygote.imported" and mark.get("module") != "torch._dynamo":
                continue
            value = mark.get(field) if field else mark["t"]
            if value is None:
                continue
            seconds = value - zero
            rows[worker][column] = min(seconds, rows[worker].get(column, seconds))
    return dict(sorted(rows.items(), key=lambda item: int(item[0].lstrip("gw") or 0)))


def per_event(marks: list[dict], zero: float) -> dict[str, list[float]]:
    times: dict[str, list[float]] = defaultdict(list)
    for mark in marks:
        times[mark["event"]].append(mark["t"] - zero)
    return dict(sorted(times.items(), key=lambda item: min(item[1])))


def render(marks: list[dict], console: Console) -> None:
    zero = origin(marks)
    workers = per_worker(marks, zero)
    columns = [column for column, _, _ in FIRST_OF if any(column in row for row in workers.values())]
    table = Table(title="first time of each step per xdist worker (s after the bench started)")
    table.add_column("worker")
    for column in columns:
        table.add_column(column, justify="right")
    for worker, row in workers.items():
        table.add_row(worker, *(f"{row[column]:.2f}" if column in row else "-" for column in columns))
    medians = [statistics.median([row[c] for row in workers.values() if c in row]) for c in columns]
    table.add_row("median", *(f"{value:.2f}" for value in medians), style="bold")
    console.print(table)

    events = Table(title="every mark (s after the bench started)")
    for name, justify in (("event", "left"), ("count", "right"), ("min", "right"), ("median", "right"),
                          ("max", "right")):
        events.add_column(name, justify=justify)
    for event, times in per_event(marks, zero).items():
        events.add_row(event, str(len(times)), f"{min(times):.2f}", f"{statistics.median(times):.2f}",
                       f"{max(times):.2f}")
    console.print(events)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path, help="the file CUDAAGENT_TRACE named")
    args = parser.parse_args(argv)
    marks = read_trace(args.trace)
    if not marks:
        parser.error(f"{args.trace} holds no marks: was CUDAAGENT_TRACE set for the run?")
    render(marks, Console(width=200))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
