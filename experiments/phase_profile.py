"""Where one evaluation's time goes, phase by phase (#21, "measure first"): each pair is evaluated
once per repeat and `Result.profile` tabulated (seconds waiting on each worker request, its
transfer included, and the parent's comparisons), with `phase_seconds` and the wall time.

    python -m experiments.phase_profile [--pairs PROBLEMS_DIR CANDIDATES_DIR] \\
        [--device cuda|cpu] [--no-timing] [--repeats N] [--workers zygote,spawn] [--json FILE]

Default pairs: the bundled examples with the bundled candidates for the device. The first
repeat pays the cold build; the table shows every repeat and the medians of the warm ones.
`--workers zygote,spawn` profiles both ways of starting the workers (zygote.py), one after the
other, and prints the warm medians side by side. `--cprofile FILE` profiles this (the evaluating)
process's warm repeats with cProfile, prints the functions it spent most CPU in and each of its
threads' CPU seconds (#41: the parent's 1-2 CPU s per evaluation on the GPU, 0.25 s on the CPU
backend), and writes the pstats to FILE."""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import threading
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.core.config import resolve_device
from pytest_cudaagent.records.pairing import pair_directory
from pytest_cudaagent.rules import outside_view
from pytest_cudaagent.workers import zygote

REPO = Path(__file__).resolve().parents[1]


def thread_cpu_seconds() -> dict[str, float]:
    """This process's CPU seconds per thread (outside_view's reading of each task), by the Python
    thread's name where one runs on it, else the task's own name."""
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    seconds = {}
    for (_, tid), run_ns in outside_view.snapshot(os.getpid(), with_tree=False).run_ns.items():
        if tid not in names:
            try:
                with open(f"/proc/self/task/{tid}/comm") as comm:
                    names[tid] = comm.read().strip()
            except OSError:  # ended meanwhile
                continue
        seconds[f"{names[tid]} ({tid})"] = run_ns / 1e9
    return seconds


def profile_rows(pairs, config: EvalConfig, repeats: int, console: Console, workers: str = "zygote",
                 profiler: cProfile.Profile | None = None) -> list[dict]:
    os.environ[zygote.ENABLE_ENV] = "1" if workers == "zygote" else "0"
    rows = []
    for repeat in range(repeats):
        for pair in pairs:
            started = time.perf_counter()
            if profiler is not None and repeat > 0:  # the warm repeats only: the first pays the builds
                profiler.enable()
            try:
                result = evaluate(pair.problem, pair.candidate, config)
            finally:
                if profiler is not None:
                    profiler.disable()
            wall = time.perf_counter() - started
            console.print(f"repeat {repeat}: {pair.candidate.name} {result.status} in {wall:.1f} s")
            rows.append({"workers": workers, "pair": pair.candidate.stem, "repeat": repeat, "status": result.status,
                         "wall_s": wall, "started": ",".join(sorted(set(result.env.get("workers", {}).values()))),
                         **{f"phase:{name}": seconds for name, seconds in result.phase_seconds.items()},
                         **result.profile})
    return rows


def print_table(frame: pd.DataFrame, console: Console, title: str) -> None:
    table = Table(title=title)
    for column in frame.columns:
        table.add_column(str(column), overflow="fold")
    for _, row in frame.iterrows():
        table.add_row(*[f"{value:.3f}" if isinstance(value, float) else str(value) for value in row])
    console.print(table)


def print_parent_profile(profiler: cProfile.Profile, path: Path, threads_before: dict[str, float],
                         console: Console) -> None:
    profiler.create_stats()
    if not profiler.stats:  # only the warm repeats are profiled: --repeats 1 has none
        console.print("no warm repeat was profiled (the first repeat of each pair is left out): give --repeats 2 "
                      "or more for the evaluating process's profile")
        return
    profiler.dump_stats(path)
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(30)
        console.print(f"the evaluating process's main thread over the warm repeats, by {order}:")
        console.print(text.getvalue(), markup=False, highlight=False)
    after = thread_cpu_seconds()
    spent = sorted(((name, after[name] - threads_before.get(name, 0.0)) for name in after), key=lambda kv: -kv[1])
    console.print("CPU seconds per thread of the evaluating process (all repeats): "
                  + ", ".join(f"{name} {seconds:.2f}" for name, seconds in spent if seconds >= 0.01))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs=2, metavar=("PROBLEMS_DIR", "CANDIDATES_DIR"), type=Path)
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--no-timing", action="store_true", help="correctness only (no timing, no baselines)")
    parser.add_argument("--repeats", type=int, default=2, help="evaluations per pair (the first builds cold)")
    parser.add_argument("--policy", default="strict", choices=("strict", "permissive"))
    parser.add_argument("--workers", default="zygote",
                        help="how workers start, comma-separated to compare: zygote (forked), spawn")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--cprofile", type=Path, metavar="FILE",
                        help="cProfile this process over the warm repeats; pstats written to FILE")
    args = parser.parse_args(argv)
    modes = args.workers.split(",")
    if not set(modes) <= {"zygote", "spawn"}:
        parser.error("--workers takes zygote, spawn or both")
    device = resolve_device(args.device)
    problems, candidates = args.pairs or (REPO / "examples" / "problems",
                                          REPO / "examples" / "candidates" / ("cuda" if device == "cuda" else "cpu"))
    pairs = pair_directory(problems, candidates)
    if not pairs:
        print(f"phase_profile: no candidate in {candidates} is named after a problem in {problems}", file=sys.stderr)
        return 2
    config = EvalConfig(device=device, policy=args.policy, timing=not args.no_timing,
                        baselines=() if args.no_timing else ("eager",))
    console = Console(width=200)
    profiler = cProfile.Profile() if args.cprofile else None
    threads_before = thread_cpu_seconds() if profiler is not None else {}
    rows = [row for mode in modes for row in profile_rows(pairs, config, args.repeats, console, mode, profiler)]
    if profiler is not None:
        print_parent_profile(profiler, args.cprofile, threads_before, console)
    frame = pd.DataFrame(rows).fillna(0.0)
    print_table(frame.drop(columns=["repeat"]).round(3), console, f"seconds per evaluation on {device}")
    # The first repeat builds cold, in the first mode only; later modes find the build cached.
    warm = frame[frame["repeat"] > 0] if args.repeats > 1 else frame
    medians = warm.drop(columns=["pair", "repeat", "status", "started"]).groupby("workers").median().T
    medians = medians[modes].sort_values(modes[0], ascending=False)
    print_table(medians.round(3).reset_index().rename(columns={"index": "phase or request"}), console,
                "median seconds over the warm evaluations, by how the workers started")
    if args.json:
        args.json.write_text(json.dumps({"device": device, "workers": modes, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
