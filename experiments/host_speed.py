"""How fast one launch-bound model's bare call runs from process to process and over time (#40).

Each fresh process builds the model, warms it, then times blocks of bare calls (synchronised, host
clock) spaced by a pause, and reports every block's median. Stable blocks within a process but
different medians across processes point at the process (its memory layout, its hash seed); blocks
that wander within a process point at the machine (other tenants on the core, clocks). Variants:
unpinned, every process pinned to one CPU, and pinned with a fixed PYTHONHASHSEED.

    python -m experiments.host_speed --problem .kb/KernelBench/level3/34_VanillaRNNHidden.py \\
        [--processes 4] [--blocks 10] [--calls 15] [--cpu N] [--json FILE]

Prints one row per process; nothing here is asserted by a test (timings only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def blocks_in_this_process(problem: Path, blocks: int, calls: int, pause_s: float) -> list[float]:
    import torch

    from experiments.profile_residue import bare_median_ms, warmed_model

    model, inputs = warmed_model(problem)
    medians = []
    with torch.no_grad():
        for _ in range(blocks):
            medians.append(bare_median_ms(model, inputs, calls))
            time.sleep(pause_s)
    return medians


def variants(cpu: int) -> dict[str, dict]:
    return {"unpinned": {"cpu": None, "env": {}},
            f"cpu {cpu}": {"cpu": cpu, "env": {}},
            f"cpu {cpu}, hash seed 0": {"cpu": cpu, "env": {"PYTHONHASHSEED": "0"}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between blocks")
    parser.add_argument("--cpu", type=int, help="the CPU the pinned variants use (default: the last one)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(blocks_in_this_process(args.problem, args.blocks, args.calls, args.pause)))
        return 0
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    rows = []
    for process in range(args.processes):
        for name, variant in variants(cpu).items():  # interleaved, so the machine's drift hits each alike
            command = [sys.executable, "-m", "experiments.host_speed", "--child", "--problem", str(args.problem),
                       "--blocks", str(args.blocks), "--calls", str(args.calls), "--pause", str(args.pause)]
            if variant["cpu"] is not None:
                command = ["taskset", "-c", str(variant["cpu"]), *command]
            done = subprocess.run(command, env={**os.environ, **variant["env"]}, capture_output=True, text=True, check=True)
            medians = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append({"variant": name, "process": process, "blocks_ms": medians})
    table = Table(title=f"{args.problem.stem}: bare call medians per block of {args.calls} (ms)")
    for column in ("variant", "process", "first", "min", "median", "max", "max/min"):
        table.add_column(column)
    for row in sorted(rows, key=lambda row: row["variant"]):
        blocks = row["blocks_ms"]
        table.add_row(row["variant"], str(row["process"]), f"{blocks[0]:.2f}", f"{min(blocks):.2f}",
                      f"{statistics.median(blocks):.2f}", f"{max(blocks):.2f}", f"{max(blocks) / min(blocks):.2f}")
    Console().print(table)
    for name in variants(cpu):
        medians = [statistics.median(row["blocks_ms"]) for row in rows if row["variant"] == name]
        print(f"{name}: process medians {min(medians):.2f}-{max(medians):.2f} ms (max/min {max(medians) / min(medians):.2f})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
