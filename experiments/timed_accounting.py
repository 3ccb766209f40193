"""How much of what the timed loop may cost around its calls honest candidates use, and what the #44 cheats leave unaccounted (README, "Seen from outside the worker").

    python -m experiments.timed_accounting --device cpu --repeats 3 [--json out.json]

Each pair is evaluated `--repeats` times with timing (no baselines); `Result.timed_request` is
tabulated with `used`: the unaccounted time over what the loop costs by the reference's
measurement (allowed less the slack, over the factor). An honest candidate far below 1 leaves the
factor its margin; a cheat far above the factor is caught whatever the machine's load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from experiments import timed_loop_steps
from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.core.config import TimingConfig

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
LEAKY = TESTS / "data" / "problems" / "small_leaky_relu.py"
BATCH_TIMER = TESTS / "adversarial" / "batch_timer_candidates"
PAIRS = {
    "cpu": [
        (LEAKY, TESTS / "data" / "candidates" / "pytorch_leaky_relu.py"),
        (LEAKY, TESTS / "adversarial" / "honest" / "triton_with_views.py"),
        (LEAKY, BATCH_TIMER / "threads_idle_honest.py"),
        (TESTS / "data" / "problems" / "nested_inputs.py", BATCH_TIMER / "nested_honest_triton.py"),
        (LEAKY, BATCH_TIMER / "clock_gc_scaled_calls.py"),
        (LEAKY, BATCH_TIMER / "clock_reply_rewritten.py"),
    ],
    "cuda": [
        (REPO / "examples" / "problems" / "leaky_relu.py", REPO / "examples" / "candidates" / "cuda" / "leaky_relu.py"),
        (REPO / "examples" / "problems" / "softmax.py", REPO / "examples" / "candidates" / "cuda" / "softmax.py"),
        (TESTS / "compat" / "problems" / "gpu_cuda_graph.py", TESTS / "compat" / "candidates" / "gpu_cuda_graph.py"),
        (TESTS / "compat" / "problems" / "gpu_streams.py", TESTS / "compat" / "candidates" / "gpu_streams.py"),
        (TESTS / "data" / "problems" / "relu_16mb.py", BATCH_TIMER / "gpu_slow_relu_honest.py"),
        (TESTS / "data" / "problems" / "relu_16mb.py", BATCH_TIMER / "gpu_clock_events_slowed.py"),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--only", action="append", help="only the candidates whose name contains this")
    parser.add_argument("--no-sandbox-too", action="store_true",
                        help="each candidate also with the sandbox off (what the sandbox adds to the loop around the calls)")
    args = parser.parse_args()
    timing = TimingConfig(warmup_ms=5, repeat_ms=20, min_samples=6, max_samples=60)
    config = EvalConfig(device=args.device, baselines=(), policy="permissive", timing_config=timing)
    rows = []
    pairs = [(problem, candidate) for problem, candidate in PAIRS[args.device]
             if not args.only or any(part in candidate.stem for part in args.only)]
    variants = [("", config)] + ([(" (no sandbox)", dataclasses.replace(config, sandbox=False))]
                                 if args.no_sandbox_too else [])
    for _ in range(args.repeats):
        for problem, candidate in pairs:
            for label, variant in variants:
                result = evaluate(problem, candidate, variant)
                account = result.timed_request or {}
                loop_ms = (account["allowed_ms"] - timing.unaccounted_slack_ms) / timing.unaccounted_factor if account else None
                stats = result.timing.get("candidate")
                calls = stats.samples if stats is not None else None
                rows.append({"candidate": candidate.stem + label, "status": result.status,
                             "rules": sorted({violation.rule for violation in result.violations}), **account,
                             "calls": calls, "overlap": stats.launch_overlapped if stats is not None else None,
                             "unaccounted_per_call_ms": round(account["unaccounted_ms"] / calls, 3) if account and calls else None,
                             "used": round(account["unaccounted_ms"] / loop_ms, 3) if loop_ms else None,
                             "timed_loop": result.env.get("timed_loop", [])})
    table = Table(title=f"Result.timed_request, {args.device}, {args.repeats} repeats (ms)")
    columns = ["candidate", "status", "rules", "calls", "overlap", "wall_ms", "cpu_ms", "samples_ms", "unaccounted_ms",
               "unaccounted_per_call_ms", "allowed_ms", "new_threads_cpu_ms", "used"]
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(row.get(column, "")) for column in columns))
    Console(width=200).print(table)
    steps = timed_loop_steps.rows_of([{"problem": row["candidate"], "status": row["status"],
                                       "timed_request": {key: row.get(key) for key in ("unaccounted_ms", "allowed_ms")},
                                       "env": {"timed_loop": row["timed_loop"]}} for row in rows])
    Console(width=220).print(timed_loop_steps.table_of(steps, "timed loop steps, ms per call (candidate/calibration)"))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
