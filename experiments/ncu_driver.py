"""Runs a candidate's forward under an NVTX range for Nsight Compute, for timing_spread (README, Measured: "Timing repeatability and truth")."""

import argparse
import sys

import torch

from pytest_cudaagent.core.files import import_file


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("candidate")
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    problem = import_file(args.problem, "ncu_problem")
    candidate = import_file(args.candidate, "ncu_candidate")
    init_inputs = problem.get_init_inputs()
    reference = problem.Model(*init_inputs)
    model = candidate.ModelNew(*init_inputs)
    model.load_state_dict(reference.state_dict(), strict=False)
    model = model.cuda().eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        for _ in range(args.calls):
            torch.cuda.nvtx.range_push("timed")
            model(*inputs)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    sys.exit(main())
