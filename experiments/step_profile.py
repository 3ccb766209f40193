"""Where evaluations' time went, step by step, in results files side by side (#41): each file's
median over its rows of every `Result.profile` entry and phase, with the ratio of each to the
first file's. Made for one set of pairs evaluated alone (`--workers 1`) and in a batch: the steps
that grow in the batch are what the batch costs each evaluation.

    python -m experiments.step_profile alone=A/results.jsonl batch=B/results.jsonl [--prefix reference.]

A profile entry is the seconds of the evaluating process's wait on a worker's request
("reference.prepare"), of the worker's own step inside it ("reference.prepare.forward",
worker.StepSeconds), of the evaluating process's own work ("compare", "parent.lend"), or CPU
seconds of a process tree ("cpu.reference"); docs/results-format.md lists them."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table


def medians(path: Path) -> tuple[int, dict[str, float]]:
    """(rows, {entry: median over the rows that have it}) of a results file's profiles and phases."""
    values: dict[str, list[float]] = {}
    rows = 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        rows += 1
        entries = dict(row.get("profile") or {})
        entries.update({f"phase:{name}": seconds for name, seconds in (row.get("phase_seconds") or {}).items()})
        for name, seconds in entries.items():
            values.setdefault(name, []).append(float(seconds))
    return rows, {name: statistics.median(found) for name, found in values.items()}


def table(files: dict[str, Path], prefix: str = "", at_least_s: float = 0.005) -> Table:
    """A row per entry whose median is at least `at_least_s` in some file, in the entries' order."""
    read = {label: medians(path) for label, path in files.items()}
    labels = list(read)
    out = Table(title="median seconds per evaluation" + (f", entries starting {prefix!r}" if prefix else ""))
    out.add_column("entry")
    for label in labels:
        out.add_column(f"{label} ({read[label][0]} rows)", justify="right")
    for label in labels[1:]:
        out.add_column(f"{label} / {labels[0]}", justify="right")
    names = sorted({name for _, found in read.values() for name in found if name.startswith(prefix)})
    for name in names:
        found = [read[label][1].get(name) for label in labels]
        if max((value for value in found if value is not None), default=0.0) < at_least_s:
            continue
        ratios = ["-" if value is None or not found[0] else f"{value / found[0]:.2f}" for value in found[1:]]
        out.add_row(name, *("-" if value is None else f"{value:.3f}" for value in found), *ratios)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="LABEL=RESULTS_JSONL", help="results files, the first the base")
    parser.add_argument("--prefix", default="", help="only entries starting with this")
    args = parser.parse_args(argv)
    files = {}
    for given in args.files:
        label, separator, path = given.partition("=")
        if not separator or not path:
            parser.error(f"{given!r}: give each file as LABEL=PATH (alone=out/results.jsonl)")
        if not Path(path).is_file():
            parser.error(f"{path}: no such results file")
        files[label] = Path(path)
    Console(width=200).print(table(files, args.prefix))


if __name__ == "__main__":
    main()
