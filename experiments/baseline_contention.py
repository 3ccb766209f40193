"""Do busy CPU cores widen the timings of small, launch-bound problems?

Each pair is evaluated (eager and compile baselines, a fresh cache each time) twice: the machine
quiet, and every core kept busy by other processes (as a bench's other workers building and
checking do). Prints each timing's median and its IQR as a share of the median.

On the H100 (2026-11-24; a third variant then raised the timed process to nice -10): the
compile baselines' IQRs were 124-157% of their medians on the quiet machine too, and their
medians moved 3-15x from one evaluation to the next (einsum_bmm 0.023, 0.105, 0.007 ms), with
or without busy cores or the raised priority. Busy cores are not the cause; a compiled wrapper's
host time (~0.05-0.1 ms) is about as long as the L2 flush the launch hides under, so each call
lands on either side of it (README, "Small launch-bound problems").

    python -m experiments.baseline_contention [--pairs PROBLEM CANDIDATE]... [--hogs N] [--json FILE]

Default pairs: three small compatibility-suite problems whose times are mostly host launch
(tests/compat), where the H100's four-worker bench gave compile baselines IQRs of 20-130%.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pytest_cudaagent import EvalConfig, evaluate

REPO = Path(__file__).resolve().parents[1]
COMPAT = REPO / "tests" / "compat"
DEFAULT_PAIRS = [(COMPAT / "problems" / f"{name}.py", COMPAT / "candidates" / f"{name}.py")
                 for name in ("einsum_bmm", "manual_softmax", "sequential_mlp")]
VARIANTS = {"quiet": False, "busy cores": True}


def start_hogs(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def run_variant(pairs, busy: bool, hogs: int, device: str) -> list[dict]:
    rows = []
    started = start_hogs(hogs) if busy else []
    try:
        for problem, candidate in pairs:
            with tempfile.TemporaryDirectory(prefix="baseline-contention-") as cache:
                config = EvalConfig(device=device, baselines=("eager", "compile"), policy="permissive",
                                    cache_dir=Path(cache))
                result = evaluate(problem, candidate, config)
            row = {"pair": Path(candidate).stem, "status": result.status}
            for who, stats in result.timing.items():
                row[who] = {"median_ms": stats.median_ms, "iqr_share": stats.iqr_ms / stats.median_ms}
            row["unstable"] = [warning.detail.split(":")[0] for warning in result.warnings
                               if warning.rule == "unstable_baseline"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for hog in started:
            hog.kill()
            hog.wait()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs=2, action="append", metavar=("PROBLEM", "CANDIDATE"))
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 1, help="busy processes (default: one per core)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    pairs = [tuple(map(Path, pair)) for pair in args.pairs] if args.pairs else DEFAULT_PAIRS
    report = {name: run_variant(pairs, busy, args.hogs, args.device) for name, busy in VARIANTS.items()}
    table = Table(title=f"timings' median ms (IQR % of the median), {args.hogs} busy processes where busy")
    for column in ("variant", "pair", "candidate", "eager", "compile", "flagged"):
        table.add_column(column)
    for name, rows in report.items():
        for row in rows:
            cells = [f"{row[who]['median_ms']:.4f} ({100 * row[who]['iqr_share']:.0f}%)" if who in row else "-"
                     for who in ("candidate", "eager", "compile")]
            table.add_row(name, row["pair"], *cells, ", ".join(row["unstable"]) or "-")
    Console(width=150).print(table)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
