"""Does the device-time profile pass slow the calls that come after it in the same process (#40)?

A launch-bound model's bare call (synchronised, host clock) is timed in a fresh process before and
after `Timer.profile` (the Kineto/CUPTI pass that both the candidate's worker and the baseline's
loop run before their timed calls), with Kineto's CUPTI teardown on and off, several processes
each. A ratio after/before above 1 is what the pass leaves behind per process.

    python -m experiments.profile_residue --problem .kb/KernelBench/level3/34_VanillaRNNHidden.py \\
        [--problem ...] [--processes 3] [--calls 30] [--json FILE]

Prints one row per process and variant; nothing here is asserted by a test (timings only).
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

VARIANTS = {"teardown": {"TEARDOWN_CUPTI": "1"}, "no-teardown": {"TEARDOWN_CUPTI": "0"}, "no-profile": {}}


def bare_median_ms(model, inputs, calls: int) -> float:
    import torch

    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        started = time.perf_counter()
        model(*inputs)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def warmed_model(problem: Path):
    """The problem's Model on the GPU, built under no_grad after seed 0, with its inputs there,
    called five times: (model, inputs)."""
    import torch

    from pytest_cudaagent.core.files import import_file

    module = import_file(problem, "problem")
    torch.manual_seed(0)
    with torch.no_grad():
        model = module.Model(*module.get_init_inputs()).cuda()
        inputs = [value.cuda() if isinstance(value, torch.Tensor) else value for value in module.get_inputs()]
        for _ in range(5):
            model(*inputs)
    return model, inputs


def one_process(problem: Path, calls: int, profile: bool) -> dict:
    """Runs in the child: before, after one profile pass, after a second one."""
    import torch

    from pytest_cudaagent.core.config import TimingConfig
    from pytest_cudaagent.timing.timer import Clock, Timer

    model, inputs = warmed_model(problem)
    timer = Timer(Clock("cuda"), TimingConfig())
    with torch.no_grad():
        row = {"before_ms": bare_median_ms(model, inputs, calls)}
        for label in ("after_1", "after_2"):
            if profile:
                timer.profile(model, [inputs], lambda call: call(), row["before_ms"])
            row[f"{label}_ms"] = bare_median_ms(model, inputs, calls)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, action="append", required=True)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=3, metavar=("PROBLEM", "CALLS", "PROFILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(one_process(Path(args.child[0]), int(args.child[1]), args.child[2] == "1")))
        return 0
    rows = []
    for problem in args.problem:
        for process in range(args.processes):
            for variant, env in VARIANTS.items():
                child_env = {key: value for key, value in os.environ.items() if key != "TEARDOWN_CUPTI"} | env
                done = subprocess.run([sys.executable, "-m", "experiments.profile_residue", "--problem", str(problem),
                                       "--child", str(problem), str(args.calls), "0" if variant == "no-profile" else "1"],
                                      env=child_env, capture_output=True, text=True, check=True)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append({"problem": problem.stem, "process": process, "variant": variant, **row})
    table = Table(title="bare call before and after the device-time profile pass (median ms)")
    for column in ("problem", "process", "variant", "before", "after 1 pass", "after 2 passes", "ratio"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["problem"], str(row["process"]), row["variant"], f"{row['before_ms']:.3f}",
                      f"{row['after_1_ms']:.3f}", f"{row['after_2_ms']:.3f}", f"{row['after_2_ms'] / row['before_ms']:.2f}")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
