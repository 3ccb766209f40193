"""Measures what the run-time guard adds to a timed call (README, "Why timed calls run bare").

    python -m experiments.guard_overhead --problem examples/problems/leaky_relu.py \
        --candidate examples/candidates/cuda/leaky_relu.py
"""

from __future__ import annotations

import argparse
import sys

import torch
from rich.console import Console
from rich.table import Table

from pytest_cudaagent.core.config import TimingConfig
from pytest_cudaagent.core.files import import_file
from pytest_cudaagent.rules.guards import ForwardGuard
from pytest_cudaagent.rules.rules import get_policy
from pytest_cudaagent.timing.timer import Clock, Timer


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    problem = import_file(args.problem, "overhead_problem")
    candidate = import_file(args.candidate, "overhead_candidate")
    init_inputs = problem.get_init_inputs()
    reference = problem.Model(*init_inputs).to(args.device).eval()
    model = candidate.ModelNew(*init_inputs)
    model.load_state_dict(reference.state_dict(), strict=False)
    model = model.to(args.device).eval()
    sets = [[x.to(args.device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()] for _ in range(3)]
    timer = Timer(Clock(args.device), TimingConfig(device_time=False))
    guard = ForwardGuard(get_policy("strict"), args.device)
    rows = []
    with torch.no_grad():
        for label, fn, wrapper in (("eager reference", reference, None), ("candidate, unguarded", model, None),
                                   ("candidate, light guard (timed calls)", model, guard.light()),
                                   ("candidate, full guard (correctness calls)", model, guard)):
            timed = fn if wrapper is None else (lambda *inputs, fn=fn, wrapper=wrapper: wrapper(lambda: fn(*inputs)))
            median = sorted(timer.measure(timed, sets).samples_ms)
            rows.append((label, median[len(median) // 2]))
    table = Table("what", "median ms", "vs unguarded", title="guard overhead per forward call")
    unguarded = rows[1][1]
    for label, median in rows:
        table.add_row(label, f"{median:.4f}", f"{median - unguarded:+.4f} ms")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
