"""Where a batch's first seconds go: the marks of a run traced with CUDAAGENT_TRACE
(pytest_cudaagent.system.start_trace), as seconds after the bench's own process started.

    CUDAAGENT_TRACE=/tmp/trace.jsonl cudaagent bench ... --no-timing
    python -m experiments.start_trace /tmp/trace.jsonl --plot start.png

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


# The spans drawn per xdist worker: (label, colour, from event, to event, lane); lane 0 is the
# pytest worker's own process, lane 1 its zygote.
SPANS = (
    ("pytest start", "#bbbbbb", "created", "configure", 0),
    ("torch for the evaluation core", "#ff7f0e", "item", "imported", 0),
    ("zygote: torch", "#9467bd", "zygote", "ready", 1),
    ("zygote: torch._dynamo", "#c5b0d5", "ready", "dynamo", 1),
)


def items_per_worker(marks: list[dict], zero: float) -> dict[str, list[tuple[float, float]]]:
    """Each xdist worker's items, (start, end) in seconds after `zero`, in order."""
    started: dict[tuple[str, str], float] = {}
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for mark in sorted(marks, key=lambda mark: mark["t"]):
        key = (mark.get("xdist"), mark.get("pair"))
        if mark["event"] == "item.start":
            started[key] = mark["t"] - zero
        elif mark["event"] == "item.end" and key in started:
            spans[key[0]].append((started.pop(key), mark["t"] - zero))
    return dict(spans)


def plot(marks: list[dict], path: Path) -> None:
    """One row per xdist worker: its process's start, its items (alternating blues; over the first,
    its torch import), its zygote's imports (a lane below) and the forks it asked for (ticks)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    zero = origin(marks)
    workers = per_worker(marks, zero)
    items = items_per_worker(marks, zero)
    figure, axes = plt.subplots(figsize=(12, 0.7 * len(workers) + 1.5))
    labelled: set[str] = set()

    def bar(y: float, start: float, end: float, colour: str, label: str, zorder: int = 2) -> None:
        axes.barh(y, end - start, left=start, height=0.35, color=colour, zorder=zorder,
                  label=None if label in labelled else label)
        labelled.add(label)

    for row, (worker, steps) in enumerate(workers.items()):
        for label, colour, begin, end, lane in SPANS:
            if begin in steps and end in steps:
                bar(row + 0.4 * lane, steps[begin], steps[end], colour, label, zorder=3)  # over its item
        for index, (start, end) in enumerate(items.get(worker, [])):
            bar(row, start, end, "#1f77b4" if index % 2 == 0 else "#aec7e8", "item (evaluation)")
        forks = [mark["t"] - zero for mark in marks if mark.get("xdist") == worker and mark["event"] == "zygote.forked"]
        axes.plot(forks, [row + 0.4] * len(forks), "k|", markersize=10, label=None if "fork" in labelled else "fork")
        labelled.add("fork")
    axes.set_yticks(range(len(workers)), list(workers))
    axes.invert_yaxis()
    axes.set_xlabel("seconds after the bench started")
    axes.set_title("a batch's start, per xdist worker (CUDAAGENT_TRACE)")
    axes.legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path, help="the file CUDAAGENT_TRACE named")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="also draw the workers' timelines here")
    args = parser.parse_args(argv)
    marks = read_trace(args.trace)
    if not marks:
        parser.error(f"{args.trace} holds no marks: was CUDAAGENT_TRACE set for the run?")
    render(marks, Console(width=200))
    if args.plot:
        plot(marks, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
