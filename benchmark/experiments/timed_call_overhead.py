"""What a timed call costs above the kernel itself: median time of the timed calls against the
profiler's device time, for the candidate and for the eager baseline, with the sandbox on and off
and the launch hidden under the flush or counted (`--count-launch`).

    python -m benchmark.experiments.timed_call_overhead [--problem P --candidate C] [--json FILE]

On the H100 (2026-11-23) the bundled CUDA leaky ReLU (a 48 us kernel) timed at 138 us where the
test `test_a_kernel_on_the_timing_stream_is_timed_with_its_launch_hidden_under_the_flush` allows
kernel + 30 us, while the eager baseline of a 16 MiB ReLU timed within 2.5 us of its kernel: this
script separates the sandbox, the launch rule and the candidate's path, one variant per row."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pytest_cudaagent import EvalConfig, evaluate

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {  # name -> (sandbox, overlap_launch)
    "sandboxed, launch hidden": (True, True),
    "not sandboxed, launch hidden": (False, True),
    "sandboxed, launch counted": (True, False),
    "not sandboxed, launch counted": (False, False),
}


def run_variant(problem: Path, candidate: Path, sandbox: bool, overlap: bool, device: str, policy: str) -> dict:
    config = EvalConfig(device=device, baselines=("eager",), sandbox=sandbox, policy=policy)
    config.timing_config.overlap_launch = overlap
    result = evaluate(problem, candidate, config)
    row = {"status": result.status}
    for name in ("candidate", "eager"):
        stats = result.timing.get(name)
        if stats is None:
            continue
        over = stats.median_ms - stats.device_ms if stats.device_ms is not None else None
        row[name] = {"median_ms": stats.median_ms, "device_ms": stats.device_ms, "over_device_us": over and 1000 * over,
                     "samples": stats.samples, "launch_overlapped": stats.launch_overlapped}
    row["phase_seconds"] = dict(result.phase_seconds)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, default=REPO / "examples/problems/leaky_relu.py")
    parser.add_argument("--candidate", type=Path, default=REPO / "examples/candidates/cuda/leaky_relu.py")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--policy", default="strict", choices=("strict", "permissive"),
                        help="permissive for a candidate made of PyTorch operators")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    console = Console(width=150)
    rows = {}
    for name, (sandbox, overlap) in VARIANTS.items():
        rows[name] = run_variant(args.problem, args.candidate, sandbox, overlap, args.device, args.policy)
        console.print(f"{name}: {rows[name]['status']}")
    table = Table(title=f"timed call above device time: {args.candidate.name} on {args.device}")
    for column in ("variant", "who", "median us", "device us", "median - device us", "samples", "launch hidden"):
        table.add_column(column)
    for name, row in rows.items():
        for who in ("candidate", "eager"):
            if who not in row:
                continue
            stats = row[who]
            device_us = stats["device_ms"] and 1000 * stats["device_ms"]
            table.add_row(name, who, f"{1000 * stats['median_ms']:.1f}", f"{device_us:.1f}" if device_us else "-",
                          f"{stats['over_device_us']:.1f}" if stats["over_device_us"] is not None else "-",
                          str(stats["samples"]), str(stats["launch_overlapped"]))
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
