"""Tiny KernelBench-shaped problem trees and permissive candidates (torch ops, no build) for the
benchmark tests; nothing here is a KernelBench problem file."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_cudaagent.core.result import Result, TimingStats
from pytest_cudaagent.records.results_file import append_result

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expression}


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expression}
'''

# (level, file name, reference expression)
TREE = [
    ("1", "1_Tiny_relu.py", "torch.relu(x)"),
    ("1", "2_Tiny_scale.py", "x * 2.0"),
    ("2", "1_Tiny_relu_add.py", "torch.relu(x) + 1.0"),
]


def make_kernelbench_tree(root: Path) -> Path:
    """`root/KernelBench/level<L>/<id>_<Name>.py`, like a clone."""
    for level, name, expression in TREE:
        path = root / "KernelBench" / f"level{level}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PROBLEM.format(expression=expression))
    return root


def write_candidate(path: Path, expression: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CANDIDATE.format(expression=expression))
    return path


def fake_result(problem: str, candidate: str, status: str = "passed", candidate_ms: float = 1.0,
                eager_ms: float | None = 2.0, compile_ms: float | None = 1.5, precision=(),
                env: dict | None = None) -> Result:
    """A Result as the evaluator writes it, with chosen times, for leaderboard arithmetic."""
    passed = status == "passed"
    timing = {}
    if passed:
        timing["candidate"] = TimingStats(candidate_ms, 0.01, 50)
        if eager_ms is not None:
            timing["eager"] = TimingStats(eager_ms, 0.01, 50)
        if compile_ms is not None:
            timing["compile"] = TimingStats(compile_ms, 0.01, 50)
    result = Result(problem, candidate, status=status, passed=passed, correct=passed or status == "violation",
                    timing=timing, precision=list(precision),
                    env=env or {"device": "cuda", "gpu_name": "Test GPU", "torch": "2.11.0"},
                    phase_seconds={"build": 1.0, "correctness": 0.5, "timing": 0.2, "baselines": 0.3})
    if passed and eager_ms is not None:
        result.speedup_vs_eager = eager_ms / candidate_ms
    if passed and compile_ms is not None:
        result.speedup_vs_compile = compile_ms / candidate_ms
    result.reward = -1.0 if not passed else (3.0 if (result.speedup_vs_compile or 0) > 1.05 else
                                              2.0 if (result.speedup_vs_eager or 0) > 1.05 else 1.0)
    return result


def write_results(path: Path, results: list[Result]) -> Path:
    for result in results:
        append_result(path, result)
    return path


def cli_parser() -> argparse.ArgumentParser:
    """`cudaagent` with only this package's subcommands, as pytest_cudaagent.cli wires them."""
    from benchmark.cli import register

    parser = argparse.ArgumentParser(prog="cudaagent")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def run_cli(argv: list[str]) -> int:
    args = cli_parser().parse_args(argv)
    return args.func(args)
