"""What a timed call costs above the kernel itself: median time of the timed calls against the
profiler's device time, for the candidate and for the eager baseline, with the sandbox on and off
and the launch hidden under the flush or counted (`--count-launch`).

    python -m benchmark.experiments.timed_call_overhead [--problem P --candidate C] [--json FILE]

On the H100 (2026-11-23) the bundled CUDA leaky ReLU (a 48 us kernel) timed at 138 us where the
test `test_a_kernel_on_the_timing_stream_is_timed_with_its_launch_hidden_under_the_flush` allows
kernel + 30 us, while the eager baseline of a 16 MiB ReLU timed within 2.5 us of its kernel: this
script separates the sandbox, the launch rule and the candidate's path, one variant per row.

`--gaps` times the eager leaky ReLU in this process through the same Timer with what may lie
between timed calls (nothing, the inputs and outputs going over the bus, an idle sleep; with and
without 20 ms of flushes first, to raise the clocks), with the SM clock NVML reports before each call.
H100 (2026-11-23): back to back 1.8 us above the kernel, after the bus or an idle 20 ms 29-32 us,
with the flushes first 33-40 us, the SM clock at 1980 MHz throughout. The candidate's timed calls,
which went over the bus, now run back to back (timer.staged_on_device): 51.2 us against 48.0."""

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


def raise_clocks(timer, milliseconds: float = 20.0) -> None:
    """The device kept busy with flushes, then idle only while the host launches the next call."""
    import time

    import torch

    start = time.perf_counter()
    while time.perf_counter() - start < milliseconds / 1000:
        for _ in range(4):
            timer.flush_cache()
        torch.cuda.synchronize()


def gap_rows(calls: int = 10) -> dict:
    """Median timed call above the profiled kernel for each way of spending the time between calls."""
    import statistics
    import time

    import pynvml
    import torch

    from pytest_cudaagent.config import TimingConfig
    from pytest_cudaagent.timer import Clock, Timer, load_content

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    timer = Timer(Clock("cuda"), TimingConfig())

    def leaky(x):
        return torch.nn.functional.leaky_relu(x, 0.01)

    host_sets = [[torch.randn(4096, 4096)] for _ in range(calls)]
    device_sets = [[value.cuda() for value in content] for content in host_sets]
    buffer = [device_sets[0][0].clone()]
    per_call_ms = timer.warm_up(lambda b: lambda: leaky(*b), [buffer])
    device_ms = timer.profile(leaky, [buffer], lambda call: call(), per_call_ms).device_ms

    def between(kind: str, index: int, output) -> None:
        if kind == "over the bus":
            output.to("cpu")
            load_content(buffer, [host_sets[index][0].to("cuda")])
        elif kind.startswith("idle"):
            time.sleep(0.02)
            load_content(buffer, device_sets[index])
        else:
            load_content(buffer, device_sets[index])

    rows = {}
    for kind in ("back to back", "over the bus", "idle 20 ms", "over the bus, clocks raised", "idle 20 ms, clocks raised"):
        samples, clocks = [], []
        output = leaky(*buffer)
        for index in range(calls):
            between(kind.split(",")[0], index, output)
            if kind.endswith("clocks raised"):
                raise_clocks(timer)
            clocks.append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            elapsed_ms, output = timer.timed_call(lambda: leaky(*buffer), True)
            samples.append(elapsed_ms)
        rows[kind] = {"median_us": 1000 * statistics.median(samples), "device_us": 1000 * device_ms,
                      "sm_clock_mhz": statistics.median(clocks)}
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, default=REPO / "examples/problems/leaky_relu.py")
    parser.add_argument("--candidate", type=Path, default=REPO / "examples/candidates/cuda/leaky_relu.py")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--policy", default="strict", choices=("strict", "permissive"),
                        help="permissive for a candidate made of PyTorch operators")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--gaps", action="store_true", help="the in-process gap rows only")
    args = parser.parse_args(argv)
    console = Console(width=150)
    if args.gaps:
        gaps = gap_rows()
        table = Table(title="eager leaky ReLU (64 MiB) through Timer.timed_call, by what lies between calls")
        for column in ("between calls", "median us", "device us", "median - device us", "SM clock MHz"):
            table.add_column(column)
        for kind, row in gaps.items():
            table.add_row(kind, f"{row['median_us']:.1f}", f"{row['device_us']:.1f}",
                          f"{row['median_us'] - row['device_us']:.1f}", f"{row['sm_clock_mhz']:.0f}")
        console.print(table)
        if args.json:
            args.json.write_text(json.dumps(gaps, indent=1))
        return 0
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
