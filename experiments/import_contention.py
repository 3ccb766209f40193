"""What the zygote's imports cost when several evaluating processes start at once (#41).

`cudaagent bench` starts one xdist worker per evaluating process, and each starts its own worker
zygote (pytest_cudaagent/workers/zygote.py), which imports PRELOAD before it can fork the first
evaluation's workers. In the sixteenth session's pure-PyTorch batch on the H100 (8 workers) the
first eight evaluations waited 4.5-8.3 s for their zygote's first fork, after the bench had taken
about 6 s to call them: a third of our wall before any evaluation ran. This times each module of
the zygote's list in N fresh interpreters started together, so the next step (which import to
move, or whether one zygote for all the workers would pay) rests on a measurement.

    python -m experiments.import_contention [--processes 1,8] [--modules numpy,torch,...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

# Each child imports the modules in order and prints one JSON line: seconds per module.
CHILD = """
import json, sys, time
times = {}
for name in sys.argv[1:]:
    began = time.perf_counter()
    try:
        __import__(name)
    except Exception as error:
        times[name] = None
        continue
    times[name] = time.perf_counter() - began
print(json.dumps(times), flush=True)
"""


def run_wave(count: int, modules: list[str]) -> tuple[list[dict], float]:
    """`count` interpreters started together; each one's seconds per module, and the wave's wall
    from the first start to the last exit."""
    began = time.perf_counter()
    children = [subprocess.Popen([sys.executable, "-c", CHILD, *modules], stdout=subprocess.PIPE, text=True)
                for _ in range(count)]
    rows = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode != 0 or not out.strip():
            raise RuntimeError(f"an importing child exited with {child.returncode}")
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows, time.perf_counter() - began


def summarise(count: int, rows: list[dict], wall_s: float, modules: list[str]) -> list[dict]:
    """One row per module (median and max over the children; None where it did not import), and
    one for all of them together."""
    table = []
    for name in modules:
        seconds = [row[name] for row in rows if row.get(name) is not None]
        table.append({"processes": count, "module": name, "median_s": statistics.median(seconds) if seconds else None,
                      "max_s": max(seconds) if seconds else None})
    totals = [sum(value for value in row.values() if value is not None) for row in rows]
    table.append({"processes": count, "module": "(all, in order)", "median_s": statistics.median(totals),
                  "max_s": max(totals), "wave_wall_s": wall_s})
    return table


def main(argv: list[str] | None = None) -> int:
    from pytest_cudaagent.workers.zygote import PRELOAD

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,8", help="comma-separated counts of interpreters started at once")
    parser.add_argument("--modules", default=",".join(PRELOAD), help="modules in import order (default: the zygote's)")
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args(argv)
    modules = [name for name in args.modules.split(",") if name]
    counts = [int(value) for value in args.processes.split(",") if value]
    if not modules or not counts or min(counts) < 1:
        parser.error("--modules and --processes need at least one entry each, counts of 1 or more")
    table = []
    for count in counts:
        rows, wall_s = run_wave(count, modules)
        table += summarise(count, rows, wall_s, modules)
    from rich.console import Console
    from rich.table import Table

    shown = Table(title="the zygote's imports, N interpreters at once (seconds)")
    for column in ("processes", "module", "median_s", "max_s", "wave_wall_s"):
        shown.add_column(column)
    for row in table:
        shown.add_row(*[("" if row.get(column) is None else f"{row[column]:.3f}" if isinstance(row[column], float)
                         else str(row[column])) for column in ("processes", "module", "median_s", "max_s", "wave_wall_s")])
    Console(width=140).print(shown)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(table, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
