"""Measures how repeatable and how true the evaluator's times are (README, Measured: "Timing repeatability and truth").

Evaluates one candidate several times (each evaluation runs in fresh processes), reports the
spread (max/min - 1) of the end-to-end median and of the device time, and, with --ncu, compares
the device time with Nsight Compute's `gpu__time_duration` (caches flushed) for the same kernels.

    python -m experiments.timing_spread --problem examples/problems/leaky_relu.py \
        --candidate examples/candidates/cuda/leaky_relu.py --repeats 5 --ncu
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pytest_cudaagent import EvalConfig, evaluate


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1 if values and min(values) > 0 else float("nan")


def ncu_device_ms(problem: Path, candidate: Path, calls: int) -> float:
    """Mean per-call sum of `gpu__time_duration` over the kernels inside the timed NVTX range."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    driver = Path(__file__).with_name("ncu_driver.py")
    command = [ncu, "--metrics", "gpu__time_duration.sum", "--csv", "--nvtx", "--nvtx-include", "timed/",
               "--cache-control", "all", "--clock-control", "none",
               sys.executable, str(driver), str(problem), str(candidate), "--calls", str(calls)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    rows = [row for row in csv.DictReader(io.StringIO(run.stdout[run.stdout.find('"ID"'):]))
            if row.get("Metric Name") == "gpu__time_duration.sum"]
    if not rows:
        raise RuntimeError(f"ncu measured no kernel:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}
    total_ms = sum(float(row["Metric Value"].replace(",", "")) * scale[row["Metric Unit"]] for row in rows)
    return total_ms / calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", required=True, type=Path)
    parser.add_argument("--candidate", required=True, type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--ncu", action="store_true", help="also measure with Nsight Compute")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args(argv)

    config = EvalConfig(device=args.device, baselines=())
    runs = []
    failures = 0
    for repeat in range(args.repeats):
        result = evaluate(args.problem, args.candidate, config)
        if not result.passed:  # reported, and its times still shown: they say why
            print(f"run {repeat}: {result.summary()}", file=sys.stderr)
            failures += 1
        if "candidate" not in result.timing:
            return 1
        runs.append(result.timing["candidate"])
    table = Table("run", "end-to-end median ms", "IQR ms", "samples", "device ms",
                  title=f"{args.candidate.name}: {args.repeats} evaluations, each in fresh processes")
    for index, stats in enumerate(runs):
        table.add_row(str(index), f"{stats.median_ms:.4f}", f"{stats.iqr_ms:.4f}", str(stats.samples),
                      "-" if stats.device_ms is None else f"{stats.device_ms:.4f}")
    e2e = [s.median_ms for s in runs]
    device = [s.device_ms for s in runs if s.device_ms is not None]
    summary = {"candidate": str(args.candidate), "problem": str(args.problem), "failed_runs": failures,
               "launch_overlapped": [s.launch_overlapped for s in runs], "e2e_ms": e2e, "device_ms": device,
               "e2e_spread": spread(e2e), "device_spread": spread(device) if device else None}
    table.add_row("spread", f"{summary['e2e_spread']:.2%}", "", "",
                  f"{summary['device_spread']:.2%}" if device else "-")
    if args.ncu:
        summary["ncu_ms"] = ncu_device_ms(args.problem, args.candidate, calls=10)
        summary["device_vs_ncu"] = statistics.median(device) / summary["ncu_ms"] - 1
        table.add_row("ncu", "", "", "", f"{summary['ncu_ms']:.4f} ({summary['device_vs_ncu']:+.1%} ours vs ncu)")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
