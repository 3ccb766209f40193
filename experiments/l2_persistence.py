"""Honest and persisting-L2 ReLUs (16 MiB fp32) timed by the harness's timer with its persisting-L2 reset on and off (README, "Persisting L2").

    python -m experiments.l2_persistence [--json out.json]

Effective bandwidth counts the 16 MiB read and the 16 MiB written per call; a kernel above the
HBM peak read its input from L2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from pytest_cudaagent.core.config import TimingConfig
from pytest_cudaagent.core.files import import_file
from pytest_cudaagent.rules.l2_persistence import NoPersistenceGuard, persistence_guard
from pytest_cudaagent.timing.timer import Clock, Timer

REPO = Path(__file__).resolve().parents[1]
PROBLEM = REPO / "tests" / "data" / "problems" / "relu_16mb.py"
CANDIDATES = REPO / "tests" / "adversarial" / "gpu_candidates"
NAMES = ("honest_l2_window", "l2_persisting_init_only", "l2_persisting_window", "l2_persisting_other_stream",
         "l2_persisting_driver_api")
H100_HBM_BYTES_PER_S = 3.35e12  # H100 SXM HBM3 peak


def measure(timer: Timer, model, content_sets: list, reset: bool) -> dict:
    """One timer.measure over `content_sets`, with the timer's guard on or replaced by a no-op."""
    guard = timer.persistence
    if not reset:
        timer.persistence = NoPersistenceGuard()
    try:
        measurement = timer.measure(model, content_sets)
    finally:
        timer.persistence = guard
    moved_bytes = 2 * content_sets[0][0].nbytes
    median_ms = statistics.median(measurement.samples_ms)
    return {"median_ms": median_ms, "device_ms": measurement.device_ms,
            "tb_per_s": moved_bytes / (median_ms * 1e-3) / 1e12,
            "flagged": sorted({v.rule for v in guard.drain()})}


def reset_cost_us(guard, calls: int = 1000) -> float:
    """Host time of one reset and one read-back, the guard's cost outside the timed region."""
    start = time.perf_counter()
    for _ in range(calls):
        guard.reset()
        guard.check("timed")
    guard.drain()
    return (time.perf_counter() - start) / calls * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", nargs="+", default=list(NAMES), choices=NAMES)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU: the persisting carve-out exists only there")
    clock = Clock("cuda")
    timer = Timer(clock, TimingConfig())
    cleaner = persistence_guard("cuda", clock.timing_stream_handle(), clock.synchronize)
    problem = import_file(PROBLEM, "l2_problem")
    sets = [[value.cuda() for value in problem.get_inputs()] for _ in range(timer.config.rotating_inputs)]
    builders = [("eager torch.relu", problem.Model)]
    builders += [(name, lambda name=name: import_file(CANDIDATES / f"{name}.py", f"l2_{name}").ModelNew())
                 for name in args.candidates]
    rows = []
    with torch.no_grad():
        for label, build in builders:
            # Each candidate starts on a clean device and is built just before its rows, so what
            # its construction sets is still there for the rows without the reset (run first).
            cleaner.reset()
            model = build().cuda()
            for reset in (False, True):
                for content_sets in (sets[:1], sets):
                    row = {"candidate": label, "reset": reset, "input_sets": len(content_sets)}
                    row.update(measure(timer, model, content_sets, reset))
                    rows.append(row)
    table = Table("candidate", "reset", "input sets", "median ms", "device ms", "TB/s", "of HBM peak", "flagged",
                  title=f"16 MiB fp32 ReLU on {torch.cuda.get_device_name()}")
    for row in rows:
        device_ms = "-" if row["device_ms"] is None else f"{row['device_ms']:.4f}"
        table.add_row(row["candidate"], "on" if row["reset"] else "off", str(row["input_sets"]),
                      f"{row['median_ms']:.4f}", device_ms, f"{row['tb_per_s']:.2f}",
                      f"{row['tb_per_s'] * 1e12 / H100_HBM_BYTES_PER_S:.0%}", ", ".join(row["flagged"]) or "-")
    console = Console()
    console.print(table)
    cost = reset_cost_us(timer.persistence)
    console.print(f"reset + read-back, host time per timed call (outside the timed region): {cost:.1f} us")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "reset_cost_us": cost}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
