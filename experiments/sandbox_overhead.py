"""Measures what the candidate sandbox costs per evaluation: the same candidate, warm build cache, sandboxed and not, interleaved."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.core.config import resolve_device
from pytest_cudaagent.system.envinfo import device_name

REPO = Path(__file__).resolve().parents[1]
# On a GPU an honest CUDA extension; on the CPU a torch-operator candidate (permissive policy), so
# the measurement is the evaluation's own cost, not a Triton interpreter's, and only the eager
# baseline (torch.compile's first CPU build would take minutes on a small machine).
CASES = {
    "cuda": (REPO / "examples/problems/leaky_relu.py", REPO / "examples/candidates/cuda/leaky_relu.py", "strict",
             ("eager", "compile")),
    "cpu": (REPO / "tests/data/problems/small_leaky_relu.py",
            REPO / "tests/adversarial/sandbox_candidates/honest_torch.py", "permissive", ("eager",)),
}


def measure(device: str, repeats: int) -> tuple[dict[bool, list[tuple[float, float]]], list[float]]:
    problem, candidate, policy, baselines = CASES[device]
    samples: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    setup_ms = []  # entering the sandbox, measured inside the worker
    for round_index in range(repeats + 1):  # round 0 warms the build cache and the baselines
        for sandboxed in (True, False):
            config = EvalConfig(device=device, policy=policy, baselines=baselines, sandbox=sandboxed)
            started = time.perf_counter()
            result = evaluate(problem, candidate, config)
            wall = time.perf_counter() - started
            if not result.passed:
                raise SystemExit(f"{candidate.name} did not pass ({result.summary()}); fix that first")
            start_and_build = result.phase_seconds["sandbox"] + result.phase_seconds["build"]
            # A line per evaluation as it ends: a run cut short still shows what it measured.
            print(f"round {round_index} {'sandboxed' if sandboxed else 'not sandboxed'}: {wall:.2f} s, start + build "
                  f"{start_and_build:.2f} s"
                  + (f", env.sandbox {result.env['sandbox']}" if sandboxed and not round_index else ""), flush=True)
            if round_index:
                samples[sandboxed].append((wall, start_and_build))
                if sandboxed:
                    setup_ms.append(result.env["sandbox"]["setup_ms"])
    return samples, setup_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = resolve_device(args.device)
    samples, setup_ms = measure(device, args.repeats)
    table = Table("candidate process", "evaluation s (median)", "start + build s (median)", "runs",
                  title=f"sandbox overhead on {device_name(device)}, warm build cache")
    medians = {}
    for sandboxed in (False, True):
        walls, starts = zip(*samples[sandboxed], strict=True)
        medians[sandboxed] = statistics.median(walls), statistics.median(starts)
        table.add_row("sandboxed" if sandboxed else "not sandboxed", f"{medians[sandboxed][0]:.3f}",
                      f"{medians[sandboxed][1]:.3f}", str(len(walls)))
    extra = medians[True][0] - medians[False][0]
    table.add_row("difference", f"{extra:+.3f} ({100 * extra / medians[False][0]:+.1f}%)",
                  f"{medians[True][1] - medians[False][1]:+.3f}", "")
    Console().print(table)
    print(f"entering the sandbox (namespaces, mounts, rlimits, Landlock, capabilities), inside the worker: "
          f"median {statistics.median(setup_ms):.1f} ms, max {max(setup_ms):.1f} ms over {len(setup_ms)} runs")


if __name__ == "__main__":
    main()
