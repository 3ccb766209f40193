"""#15's two tables from their measurements: cold builds (build_speed's JSON) and `cudaagent bench`
against KernelBench's sequential loop (harness_throughput's JSON), each beside its target.

The two measurements take longer together than one command may run on the GPU machine, so each
writes its JSON and this prints them side by side:

    python -m experiments.build_speed --device cuda --modes plain,all --fresh 20 \\
        --pairs PROBLEMS CANDIDATES --jobs 8 --json builds.json
    python -m experiments.harness_throughput --device cuda --work W --phase harness
    python -m experiments.harness_throughput --device cuda --work W --phase sequential
    python -m experiments.harness_throughput --device cuda --work W --phase report --json throughput.json
    python -m experiments.build_targets --builds builds.json --throughput throughput.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

BUILD_TARGET = 3.0  # median cold build, plain load_inline over ours
THROUGHPUT_TARGET = 6.0  # `cudaagent bench` end to end over KernelBench's sequential loop
BUNDLED = ("leaky_relu", "linear_bias_relu", "row_sum", "scale_tanh_mean", "softmax")  # examples/candidates/cuda


def build_rows(records: list[dict], fast_mode: str = "all") -> list[dict]:
    """One row per group of candidates (the bundled ones, the rest, all): median builds, the median
    of each candidate's speedup, and how many kept their verdict. Candidates without both builds
    (a run cut short) are left out and counted."""
    complete = [r for r in records if r.get("plain build s") and r.get(f"{fast_mode} build s")]
    groups = {"bundled": [r for r in complete if r["candidate"] in BUNDLED],
              "fresh": [r for r in complete if r["candidate"] not in BUNDLED], "all": complete}
    rows = []
    for group, members in groups.items():
        if not members:
            continue
        speedups = [r["plain build s"] / r[f"{fast_mode} build s"] for r in members]
        rows.append({"candidates": group, "count": len(members),
                     "plain build s": statistics.median(r["plain build s"] for r in members),
                     "fast build s": statistics.median(r[f"{fast_mode} build s"] for r in members),
                     "median speedup": statistics.median(speedups),
                     "range": (min(speedups), max(speedups)),
                     "same verdicts": sum(r["plain verdict"] == r[f"{fast_mode} verdict"] for r in members)})
    return rows


def print_builds(rows: list[dict], left_out: int, console: Console) -> bool:
    table = Table("candidates", "count", "plain load_inline s", "cudaagent s", "median speedup", "range",
                  "same verdicts", f"target {BUILD_TARGET:g}x", title="cold builds (medians per candidate)")
    for row in rows:
        low, high = row["range"]
        table.add_row(row["candidates"], str(row["count"]), f"{row['plain build s']:.1f}", f"{row['fast build s']:.1f}",
                      f"{row['median speedup']:.2f}x", f"{low:.2f}-{high:.2f}x", f"{row['same verdicts']}/{row['count']}",
                      "met" if row["median speedup"] >= BUILD_TARGET and row["same verdicts"] == row["count"] else "not met")
    console.print(table)
    if left_out:
        console.print(f"{left_out} candidate(s) without both builds left out (a run cut short)")
    overall = next((row for row in rows if row["candidates"] == "all"), None)
    return bool(overall and overall["median speedup"] >= BUILD_TARGET and overall["same verdicts"] == overall["count"])


def print_throughput(report: dict, console: Console) -> bool:
    table = Table("run", "wall s", "workers", "speedup", "identical verdicts", f"target {THROUGHPUT_TARGET:g}x",
                  title="20 fresh candidates end to end")
    count = len(report["candidates"])
    same = sum(row["same_verdict"] for row in report["candidates"])
    met = report["speedup"] >= THROUGHPUT_TARGET and report["identical_verdicts"]
    table.add_row("cudaagent bench", f"{report['harness_wall_s']:.1f}", str(report["workers"]),
                  f"{report['speedup']:.2f}x", f"{same}/{count}", "met" if met else "not met")
    table.add_row("KernelBench's sequential loop", f"{report['sequential_wall_s']:.1f}", "1", "1x", "", "")
    console.print(table)
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builds", type=Path, help="build_speed --json output")
    parser.add_argument("--throughput", type=Path, help="harness_throughput --phase report --json output")
    parser.add_argument("--fast-mode", default="all", help="build_speed's mode to set against plain (default: all)")
    args = parser.parse_args(argv)
    if not (args.builds or args.throughput):
        parser.error("give --builds, --throughput or both")
    for path in (args.builds, args.throughput):
        if path is not None and not path.is_file():
            print(f"{path}: no such file; write it with the command in this script's help", file=sys.stderr)
            return 2
    console = Console(width=None if sys.stdout.isatty() else 160)
    met = []
    if args.builds:
        records = json.loads(args.builds.read_text())
        rows = build_rows(records, args.fast_mode)
        left_out = len(records) - next((row["count"] for row in rows if row["candidates"] == "all"), 0)
        met.append(print_builds(rows, left_out, console))
    if args.throughput:
        met.append(print_throughput(json.loads(args.throughput.read_text()), console))
    return 0 if all(met) else 1


if __name__ == "__main__":
    sys.exit(main())
