"""Synthesis throughput: candidates composed, filtered and kept per hour, and the time split per
filter, for one `cudaagent synth run` on this machine. Prints a table; `--json FILE` saves it.

    python benchmark/synthesis_throughput.py --count 600 --workers 12 --out /tmp/synth-bench
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from synthesis.compose import ComposerConfig
from synthesis.filters import FilterConfig
from synthesis.pipeline import SynthConfig, run_synthesis
from synthesis.pool import PoolConfig
from synthesis.report import filter_time_table, reason_table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--out", type=Path, required=True, help="run directory (a fresh one)")
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--min-ms", type=float, default=1.0)
    parser.add_argument("--max-ms", type=float, default=100.0)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--catalogue", type=Path, default=None)
    parser.add_argument("--kernelbench", type=Path, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    config = SynthConfig(
        count=args.count, out_dir=args.out, seed=args.seed, kernelbench=args.kernelbench,
        catalogue=args.catalogue,
        filters=FilterConfig(device=args.device, min_ms=args.min_ms, max_ms=args.max_ms,
                             compile=not args.no_compile),
        pool=PoolConfig(workers=args.workers), composer=ComposerConfig(),
    )
    started = time.perf_counter()
    frame = run_synthesis(config)
    wall_s = time.perf_counter() - started
    kept = int(frame["kept"].sum())
    numbers = {
        "candidates": len(frame), "kept": kept, "wall_s": wall_s,
        "candidates_per_hour": len(frame) / wall_s * 3600, "kept_per_hour": kept / wall_s * 3600,
        "workers": args.workers, "device": args.device,
        "outcomes": reason_table(frame).to_dict("records"),
        "filter_seconds": filter_time_table(frame).to_dict("records"),
    }
    console = Console()
    table = Table(title=f"synthesis throughput ({args.device}, {args.workers} workers)")
    for column in ("candidates", "kept", "wall s", "candidates/h", "kept/h"):
        table.add_column(column, justify="right")
    table.add_row(str(len(frame)), str(kept), f"{wall_s:.0f}", f"{numbers['candidates_per_hour']:.0f}",
                  f"{numbers['kept_per_hour']:.0f}")
    console.print(table)
    split = Table(title="time per filter (worker seconds)")
    for column in ("filter", "tasks", "seconds", "s/task", "share"):
        split.add_column(column, justify="right")
    for row in numbers["filter_seconds"]:
        split.add_row(row["filter"], str(row["tasks"]), f"{row['seconds']:.1f}",
                      f"{row['seconds per task']:.3f}", f"{row['share']:.1%}")
    console.print(split)
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
