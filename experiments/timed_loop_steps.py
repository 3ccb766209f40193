"""Where the loop around the timed calls spent its time, per call, in the candidate's worker and in
the reference's calibration loop (Result.env["timed_loop"]), from a bench's results.jsonl (#44).

    python -m experiments.timed_loop_steps RESULTS.jsonl [--json out.json]

One row per timed request (a request timed again has several): its status, whether the timed sets
were staged on the device, and each step of timed_calls in ms per call, candidate / calibration.
A step far over the calibration's is what a timing_unaccounted verdict on honest code comes from.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

STEPS = ("load", "seed", "flush_and_checks", "span_less_sample", "copy_outputs")


def per_call(steps: dict | None, calls: int) -> dict[str, float]:
    """Each step's milliseconds per call (`steps` are sums over `calls` calls)."""
    if not steps or calls <= 0:
        return {}
    return {step: steps[step] / calls for step in STEPS if step in steps}


def rows_of(results: list[dict]) -> list[dict]:
    """One row per timed request of every result that has timed_loop entries."""
    rows = []
    for result in results:
        account = result.get("timed_request") or {}
        for attempt, entry in enumerate(result.get("env", {}).get("timed_loop", []), start=1):
            calls = entry.get("calls") or 0
            calibration_calls = entry.get("calibration_calls") or calls
            rows.append({
                "problem": Path(result.get("problem", "?")).stem,
                "attempt": attempt,
                "status": result.get("status"),
                "staged": entry.get("staged"),
                "calls": calls,
                "unaccounted_ms": account.get("unaccounted_ms"),
                "allowed_ms": account.get("allowed_ms"),
                "candidate": per_call(entry.get("candidate_steps_ms"), calls),
                "calibration": per_call(entry.get("calibration_steps_ms"), calibration_calls),
                "before_loop_ms": (entry.get("candidate_steps_ms") or {}).get("before_loop"),
                # The worker's handler against the evaluator's window: what came before it (the
                # request's way in) and after it (the reply's way out), and the collections.
                "before_handler_ms": entry.get("before_handler_ms"),
                "after_handler_ms": entry.get("after_handler_ms"),
                "handler_gc_ms": (entry.get("handler_gc") or {}).get("ms"),
                "after_time_gc_ms": (entry.get("after_time_gc") or {}).get("ms"),
            })
    return rows


def table_of(rows: list[dict], title: str) -> Table:
    table = Table(title=title)
    for column in ("problem", "try", "status", "staged", "calls", "unacc/allowed ms",
                   *(f"{step} c/k" for step in STEPS), "before loop", "before/after handler", "gc in/after"):
        table.add_column(column)
    for row in rows:
        pairs = [f"{row['candidate'].get(step, float('nan')):.3f}/{row['calibration'].get(step, float('nan')):.3f}"
                 for step in STEPS]
        table.add_row(row["problem"][:40], str(row["attempt"]), str(row["status"]), str(row["staged"]),
                      str(row["calls"]), f"{row['unaccounted_ms']}/{row['allowed_ms']}", *pairs,
                      str(row["before_loop_ms"]), f"{row['before_handler_ms']}/{row['after_handler_ms']}",
                      f"{row['handler_gc_ms']}/{row['after_time_gc_ms']}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a bench's results.jsonl")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    results = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    rows = rows_of(results)
    Console(width=220).print(table_of(rows, f"timed loop steps, ms per call (c: candidate's worker, k: calibration), "
                                            f"{args.results}"))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
