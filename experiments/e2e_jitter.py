"""Measures where the end-to-end time's process-to-process spread comes from (README, Measured: "Timing repeatability and truth").

Runs one candidate's forward in several fresh processes (no evaluator around it) and splits each
timed call into parts: the host time to launch it, the GPU time from the start event to the end
event recorded right after the launch (no device-wide synchronisation inside), and the full
end-to-end time the evaluator reports (device-wide synchronisation, then the end event). Each
variant prints the median per process and the spread over processes, so the part that moves
between processes shows.

    python -m experiments.e2e_jitter --problem experiments/problems/leaky_relu_64m.py \
        --candidate examples/candidates/cuda/leaky_relu.py --processes 5 [--pin-core 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from experiments.timing_spread import spread

PARTS = ("e2e_ms", "stream_ms", "launch_us", "sync_us")


def measure_in_this_process(problem: Path, candidate: Path, samples: int, pin_core: int | None) -> dict:
    if pin_core is not None:
        os.sched_setaffinity(0, {pin_core})
    import torch

    from pytest_cudaagent.core.files import import_file
    from pytest_cudaagent.timing.timer import Clock

    clock = Clock("cuda")
    problem_module = import_file(problem, "jitter_problem")
    candidate_module = import_file(candidate, "jitter_candidate")
    init = problem_module.get_init_inputs()
    model = candidate_module.ModelNew(*init).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem_module.get_inputs()]
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    event_type = torch._C._CudaEventBase
    stream = torch.cuda.current_stream()
    parts = {name: [] for name in PARTS}
    with torch.no_grad():
        for _ in range(20):
            model(*inputs)
        for _ in range(samples):
            flush.fill_(0)
            clock.synchronize()
            start, after_call, end = (event_type(enable_timing=True) for _ in range(3))
            event_type.record(start, stream)
            t0 = clock.now_ns()
            model(*inputs)
            t1 = clock.now_ns()
            event_type.record(after_call, stream)
            t2 = clock.now_ns()
            clock._device_sync()
            t3 = clock.now_ns()
            event_type.record(end, stream)
            event_type.synchronize(end)
            parts["e2e_ms"].append(event_type.elapsed_time(start, end))
            parts["stream_ms"].append(event_type.elapsed_time(start, after_call))
            parts["launch_us"].append((t1 - t0) / 1e3)
            parts["sync_us"].append((t3 - t2) / 1e3)
    return {name: statistics.median(values) for name, values in parts.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--pin-core", type=int, default=None, help="pin each process to this CPU core")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_in_this_process(args.problem, args.candidate, args.samples, args.pin_core)))
        return 0
    rows = []
    for _ in range(args.processes):
        command = [sys.executable, __file__, "--child", "--problem", str(args.problem), "--candidate",
                   str(args.candidate), "--samples", str(args.samples)]
        if args.pin_core is not None:
            command += ["--pin-core", str(args.pin_core)]
        run = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append(json.loads(run.stdout.strip().splitlines()[-1]))
    title = f"{args.candidate.name} on {args.problem.name}, {args.processes} processes" + (
        f", pinned to core {args.pin_core}" if args.pin_core is not None else "")
    table = Table("process", *PARTS, title=title)
    for index, row in enumerate(rows):
        table.add_row(str(index), *[f"{row[name]:.4f}" for name in PARTS])
    table.add_row("spread", *[f"{spread([row[name] for row in rows]):.2%}" for name in PARTS])
    Console(width=150).print(table)
    if args.json:
        args.json.write_text(json.dumps({"pin_core": args.pin_core, "processes": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
