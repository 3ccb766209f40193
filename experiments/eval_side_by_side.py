"""#21's side by side: KernelBench's own `eval_kernel_against_ref` and `cudaagent bench --no-timing`
on the same pairs, every cache empty, the same number of workers, one after the other on one
machine; prints both wall times, each side's time per evaluation (ours split into the build and
what is outside it) and how often the two agree on correctness.

    python -m experiments.eval_side_by_side --kernelbench .kernelbench/ --work DIR \\
        [--workers 14] [--sides kernelbench,ours] [--pairs PROBLEMS_DIR CANDIDATES_DIR]... \\
        [--against PROBLEM CANDIDATES_DIR]... [--results KB_RESULTS_DIR] [--styles N] [--release v0.1|main] [--json FILE]
        [--our-config EVALCONFIG_JSON] [--deadline S]

`--styles 72`: the issue's set, 72 CUDA candidates in the styles of published solutions for the
checkout's own problems (published_styles.py), written under --work. Otherwise pairs are chosen as
kernelbench_differential chooses them (its default set without any option).
Each side writes `<work>/<side>.json` when it ends, so the two may run in separate calls of a
time-limited device (`--sides kernelbench`, then `--sides ours`); the table is printed from every
side found in --work. KernelBench's side needs CUDA; ours runs on `--device` (cpu to try the script).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import re
import statistics
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from benchmark.batch import BatchSettings, log_tail, run_batch
from benchmark.progress import ResultsTail
from experiments.harness_throughput import fresh_cache_env
from experiments.kernelbench_differential import (
    RELEASES,
    TRIALS,
    collect_pairs,
    kb_outcome,
    kernelbench_can_run,
    our_outcome,
    run_kernelbench,
)
from experiments.published_styles import write_pairs
from pytest_cudaagent.core.config import EvalConfig
from pytest_cudaagent.records.pairing import Pair
from pytest_cudaagent.records.results_file import read_results

SIDES = ("kernelbench", "ours")
# Result.phase_seconds up to the candidate's "built": the parent waits on each in turn while the
# candidate's worker starts, imports and builds.
UNTIL_BUILT = ("sandbox", "reference", "build")
# The processes an evaluation's CPU seconds are counted for (Result.profile "cpu.<part>").
CPU_PARTS = ("candidate", "reference", "parent")
# Their columns in the rows: the candidate's also split out until built (its compilers included).
CPU_COLUMNS = (*CPU_PARTS, "candidate_build")


def _timed_kernelbench(checkout: str, release: str, problem: str, candidate: str, build_root: str) -> dict:
    """One KernelBench evaluation in a pool process (which starts a process of its own for it)."""
    began = time.perf_counter()
    reply = run_kernelbench(Path(checkout), release, Pair(Path(problem), Path(candidate)), Path(build_root))
    outcome, detail = kb_outcome(reply)
    return {"problem": problem, "candidate": candidate, "outcome": outcome, "detail": detail[:300],
            "seconds": time.perf_counter() - began}


def run_kernelbench_side(pairs: list[Pair], checkout: Path, release: str, workers: int, work: Path,
                         side: dict) -> None:
    """Fills `side` as evaluations end (a side cut short by --deadline keeps what ended)."""
    build_root = work / "kernelbench-builds"
    build_root.mkdir(parents=True, exist_ok=True)
    # Its builds land in build_root (one directory per pair); the rest of torch's caches are empty too.
    os.environ.update(fresh_cache_env(work / "kernelbench-caches"))
    side.update({"side": "kernelbench", "workers": workers, "rows": []})
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_timed_kernelbench, str(checkout), release, str(pair.problem), str(pair.candidate),
                               str(build_root)) for pair in pairs]
        for future in as_completed(futures):
            row = future.result()
            side["rows"].append(row)
            print(f"kernelbench {len(side['rows'])}/{len(pairs)} at {time.perf_counter() - side['began']:.0f} s: "
                  f"{Path(row['candidate']).stem} {row['outcome']} in {row['seconds']:.1f} s", flush=True)


OUTSIDE_PHASES = ("parent.start", "parent.scan", "parent.spawn_reference", "parent.spawn_candidate", "parent.sandbox",
                  "parent.close", "parent.tampering")


def _profile_column(label: str) -> str:
    """A row's column for a Result.profile label: parent.start -> parent_start_s."""
    return f"{label.replace('.', '_')}_s"


def _watch_arrivals(side: dict, stop: threading.Event) -> None:
    """When each of our results arrived (seconds since the side began), in the results file's
    order: with each evaluation's own seconds, when it began, so what the batch spends outside
    evaluations (pytest's start, its workers', waits between them) shows."""
    arrivals = side.setdefault("arrivals", [])
    tail = None
    while not stop.wait(0.5):
        if tail is None and side.get("results"):
            tail = ResultsTail(Path(side["results"]), 0)  # only what is new, at each look
        if tail is not None:
            arrivals.extend([round(time.perf_counter() - side["began"], 1)] * len(tail.poll()))


def our_rows(results_path: Path, arrivals: list[float] = ()) -> list[dict]:
    """Our side's rows, from the results file the batch appends to as evaluations end."""
    rows = []
    for index, result in enumerate(read_results(results_path) if results_path.exists() else []):
        phases = result.phase_seconds
        # The candidate builds from its start: the sandbox's and the reference's phases are waits
        # the build overlaps, so "build" is the time until it was built, and outside it what follows.
        until_built = sum(phases.get(name, 0.0) for name in UNTIL_BUILT)
        built_after = result.profile.get("candidate.built_after")
        rows.append({"problem": result.problem, "candidate": result.candidate, "outcome": our_outcome(result.status),
                     "status": result.status, "build_s": until_built,
                     "outside_build_s": sum(phases.values()) - until_built, "seconds": sum(phases.values()),
                     # the worker's own build time (its imports and the candidate's load_inline)
                     "built_after_s": built_after,
                     # CPU seconds of the evaluation's own processes: beside the machine's per
                     # evaluation, what the batch spends outside them (pytest, test workers, zygotes)
                     "evaluation_cpu_s": sum(result.profile.get(f"cpu.{part}", 0.0) for part in CPU_PARTS),
                     **{f"cpu_{part}_s": result.profile.get(f"cpu.{part}") for part in CPU_COLUMNS},
                     # the evaluating process's own time outside the phases (Result.profile)
                     **{_profile_column(label): result.profile.get(label) for label in OUTSIDE_PHASES},
                     "started_by": ",".join(f"{side}={how}" for side, how in sorted(result.env.get("workers", {}).items())),
                     # when it ended, and so began, in seconds since the side began
                     "ended_at_s": arrivals[index] if index < len(arrivals) else None,
                     "began_at_s": (round(arrivals[index] - sum(phases.values()), 1) if index < len(arrivals)
                                    else None)})
    return rows


def cpu_by_process(sides: dict[str, dict]) -> list[dict]:
    """Our side's mean CPU seconds per evaluation by process tree (Result.profile's cpu.*): the
    candidate's (its build's compilers included; `candidate_build`: of it, until built), the
    reference's and the evaluating process's."""
    rows = sides.get("ours", {}).get("rows", [])
    summary = {"side": "ours", "pairs": len(rows)}
    for part in CPU_COLUMNS:
        values = [row.get(f"cpu_{part}_s") for row in rows if row.get(f"cpu_{part}_s") is not None]
        summary[part] = statistics.mean(values) if values else None
    return [summary] if rows else []


def run_our_side(pairs: list[Pair], release: str, workers: int, work: Path, device: str, console: Console,
                 side: dict, config_file: Path | None = None, fast_build: bool = True) -> None:
    """`cudaagent bench --no-timing --policy permissive` as a user runs it (the shared PCH on,
    `--no-fast-build` of this script turns it off), every cache empty."""
    os.environ.update(fresh_cache_env(work / "ours-caches"))
    base = EvalConfig.from_dict(json.loads(config_file.read_text())) if config_file else EvalConfig()
    settings = BatchSettings(dataclasses.replace(base, device=device, trials=TRIALS, baselines=(), timing=False,
                                                 policy="permissive", tolerance=RELEASES[release][1],
                                                 convention="kernelbench", fast_build=fast_build or base.fast_build),
                             workers=workers)
    results_path = work / "ours" / "results.jsonl"
    results_path.unlink(missing_ok=True)  # a side is always measured from nothing
    results_path.parent.mkdir(parents=True, exist_ok=True)
    side.update({"side": "ours", "workers": workers, "results": str(results_path)})
    outcome = run_batch(pairs, results_path, settings, console=console)
    side.update({"workers": outcome.workers, "missing": outcome.missing})
    if outcome.missing:
        console.print(f"[red]{outcome.missing} pairs ended without a result[/red] (bad files?); "
                      f"the run's log, {outcome.log_path}, ends:\n{log_tail(outcome.log_path, 12)}")


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine so far, every process counted: on a device of its
    own, a side's compute, whatever process tree it ran in."""
    times = psutil.cpu_times()
    return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


def run_side(name: str, pairs: list[Pair], args, console: Console) -> dict:
    """One side, timed; with --deadline, what ended by then (`finished` false, wall = the deadline)."""
    side: dict = {"side": name, "workers": args.workers, "rows": [], "began": time.perf_counter()}
    if name == "kernelbench":
        work = lambda: run_kernelbench_side(pairs, args.kernelbench, args.release, args.workers, args.work, side)  # noqa: E731
    else:
        work = lambda: run_our_side(pairs, args.release, args.workers, args.work, args.device, console, side,  # noqa: E731
                                    getattr(args, "our_config", None), not getattr(args, "no_fast_build", False))
    cpu_before = machine_cpu_s()
    runner = threading.Thread(target=work, daemon=True)
    stop_watching = threading.Event()
    watcher = threading.Thread(target=_watch_arrivals, args=(side, stop_watching), daemon=True)
    runner.start()
    watcher.start()
    runner.join(args.deadline)
    stop_watching.set()
    watcher.join()
    side["finished"] = not runner.is_alive()
    side["wall_s"] = time.perf_counter() - side.pop("began")
    side["machine_cpu_s"] = machine_cpu_s() - cpu_before
    if name == "ours":
        side["rows"] = our_rows(Path(side.pop("results")), side.pop("arrivals", []))
        began = [row["began_at_s"] for row in side["rows"] if row["began_at_s"] is not None]
        if began:
            # (a row's start is its end less its phases: the fork of its workers comes before)
            console.print(f"ours: the first evaluation began about {min(began):.1f} s after the side did, "
                          f"the last ended at {max(row['ended_at_s'] for row in side['rows'] if row['ended_at_s']):.1f} s")
            outside = {label: _median(side["rows"], _profile_column(label)) for label in OUTSIDE_PHASES}
            console.print("ours: median seconds outside the phases: "
                          + ", ".join(f"{label} {value:.2f}" for label, value in outside.items() if value is not None))
    side["rows"] = list(side["rows"])
    side["pairs_asked"] = len(pairs)
    return side


def _median(rows: list[dict], column: str) -> float | None:
    """The column's median over the rows that have it (KernelBench's rows have no build split)."""
    values = [row[column] for row in rows if row.get(column) is not None]
    return statistics.median(values) if values else None


def summarise(sides: dict[str, dict]) -> list[dict]:
    """A row per side: wall time, evaluations, median seconds per evaluation (ours also its
    build and the rest), and the wall relative to KernelBench's."""
    kb_wall = sides.get("kernelbench", {}).get("wall_s")
    summary = []
    for name in SIDES:
        if name not in sides:
            continue
        side, rows = sides[name], sides[name]["rows"]
        summary.append({
            "side": name, "workers": side["workers"], "pairs": len(rows), "asked": side.get("pairs_asked", len(rows)),
            "wall_s": side["wall_s"],
            "median_eval_s": _median(rows, "seconds"),
            "median_build_s": _median(rows, "build_s"),
            "median_outside_build_s": _median(rows, "outside_build_s"),
            # none where either side was cut at the deadline: the walls then measure different work
            "wall_vs_kernelbench": (side["wall_s"] / kb_wall if kb_wall and side.get("finished", True)
                                    and sides["kernelbench"].get("finished", True) else None),
            # the machine's busy CPU seconds per evaluation that ended (all of a side's processes)
            "cpu_s_per_eval": side["machine_cpu_s"] / len(rows) if side.get("machine_cpu_s") and rows else None,
            "evaluation_cpu_s": (statistics.mean(row["evaluation_cpu_s"] for row in rows)
                                 if rows and all(row.get("evaluation_cpu_s") for row in rows) else None),
        })
    return summary


def level_of(problem: str) -> str:
    """`level2` for a problem written by published_styles (`level2_<name>.py`) or named as
    KernelBench's solutions are (`level_2_problem_36_sample_0_kernel.py`: the identity pairs),
    else `other` (the fifteenth session's pure-PyTorch table put all 32 under "level")."""
    found = re.match(r"level_?(\d+)_", Path(problem).stem)
    return f"level{found.group(1)}" if found else "other"


def by_level(sides: dict[str, dict]) -> list[dict]:
    """Per side and level: evaluations and median seconds per evaluation (ours: outside the
    build too, #21's target: 3 s on levels 1 and 2, 10 s on level 3)."""
    summary = []
    for name in SIDES:
        rows = sides.get(name, {}).get("rows", [])
        for level in sorted({level_of(row["problem"]) for row in rows}):
            chosen = [row for row in rows if level_of(row["problem"]) == level]
            outside = [row["outside_build_s"] for row in chosen if "outside_build_s" in row]
            summary.append({"side": name, "level": level, "pairs": len(chosen),
                            "median_eval_s": _median(chosen, "seconds"),
                            "median_outside_build_s": _median(chosen, "outside_build_s"),
                            "max_outside_build_s": max(outside) if outside else None})
    return summary


def agreement(sides: dict[str, dict]) -> tuple[int, int] | None:
    """(pairs both sides judged alike on correctness, pairs both judged); None without both."""
    if not set(SIDES) <= set(sides):
        return None

    def correct_by_pair(rows: list[dict]) -> dict[tuple[str, str], bool]:
        return {(str(Path(row["problem"]).resolve()), str(Path(row["candidate"]).resolve())): row["outcome"] == "correct"
                for row in rows}

    theirs, ours = correct_by_pair(sides["kernelbench"]["rows"]), correct_by_pair(sides["ours"]["rows"])
    both = theirs.keys() & ours.keys()
    return sum(theirs[key] == ours[key] for key in both), len(both)


def _table(title: str, columns: tuple[str, ...], rows: list[dict]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*[("" if row[c] is None else f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]))
                        for c in columns])
    return table


def print_summary(sides: dict[str, dict], console: Console) -> None:
    console.print(_table("KernelBench's eval and ours, side by side (correctness only, cold caches; seconds)",
                         ("side", "workers", "pairs", "asked", "wall_s", "median_eval_s", "median_build_s",
                          "median_outside_build_s", "wall_vs_kernelbench", "cpu_s_per_eval", "evaluation_cpu_s"),
                         summarise(sides)))
    console.print(_table("per level (seconds per evaluation)",
                         ("side", "level", "pairs", "median_eval_s", "median_outside_build_s", "max_outside_build_s"),
                         by_level(sides)))
    console.print(_table("our CPU seconds per evaluation, by process tree", ("side", "pairs", *CPU_COLUMNS),
                         cpu_by_process(sides)))
    agreed = agreement(sides)
    if agreed:
        console.print(f"agreement on correctness: {agreed[0]} of {agreed[1]} pairs")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.eval_side_by_side",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench", type=Path, default=Path(".kernelbench"), help="a KernelBench checkout")
    parser.add_argument("--work", type=Path, required=True, help="caches, builds and each side's JSON")
    parser.add_argument("--workers", type=int, default=14, help="evaluations at once, both sides (default 14)")
    parser.add_argument("--sides", default="kernelbench,ours", help="which to run now, comma-separated")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="our side's device")
    parser.add_argument("--release", choices=sorted(RELEASES), default="v0.1",
                        help="whose fp32 tolerance: v0.1 (1e-2) or main (1e-4)")
    parser.add_argument("--pairs", nargs=2, action="append", metavar=("PROBLEMS_DIR", "CANDIDATES_DIR"))
    parser.add_argument("--against", nargs=2, action="append", metavar=("PROBLEM", "CANDIDATES_DIR"))
    parser.add_argument("--results", type=Path, help="a KernelBench results tree, paired with the checkout's problems")
    parser.add_argument("--styles", type=int, metavar="N",
                        help="N candidates in published solutions' styles for the checkout's problems (instead of the default set)")
    parser.add_argument("--json", type=Path, help="write the summary and both sides here")
    parser.add_argument("--our-config", type=Path, metavar="JSON",
                        help="an EvalConfig JSON for our side (--cudaagent-config), e.g. {\"fast_build\": true}")
    parser.add_argument("--no-fast-build", action="store_true",
                        help="our side without the shared precompiled torch/extension.h (cudaagent bench --no-fast-build)")
    parser.add_argument("--deadline", type=float, default=None, metavar="S",
                        help="stop waiting for a side after S seconds and keep what ended (a time-limited device)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(width=180)
    sides_now = [side.strip() for side in args.sides.split(",") if side.strip()]
    unknown = set(sides_now) - set(SIDES)
    if unknown:
        console.print(f"[red]unknown side {', '.join(sorted(unknown))}[/red]; sides: {', '.join(SIDES)}")
        return 2
    if "kernelbench" in sides_now and not kernelbench_can_run(
            args.kernelbench, console, "run `--sides ours --device cpu` to try the script here"):
        return 2
    if args.styles:
        if not (args.kernelbench / "KernelBench" / "level1").is_dir():
            console.print(f"[red]{args.kernelbench} holds no KernelBench/level1[/red]: --styles writes candidates for its problems")
            return 2
        styles = args.work / "styles"
        write_pairs(args.kernelbench, styles, args.styles)
        args.pairs = [*(args.pairs or []), (str(styles / "problems"), str(styles / "candidates"))]
    pairs = [pair for _, pair in collect_pairs(args)]
    if not pairs:
        console.print("[red]no pairs:[/red] --pairs pairs a candidate with the problem of the same file name")
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    for side in sides_now:
        console.print(f"{side}: {len(pairs)} pairs, {args.workers} at once")
        measured = run_side(side, pairs, args, console)
        (args.work / f"{side}.json").write_text(json.dumps(measured, indent=1))
        console.print(f"{side}: {len(measured['rows'])} of {len(pairs)} evaluations ended in {measured['wall_s']:.1f} s"
                      + ("" if measured["finished"] else f" (cut at the --deadline, {args.deadline:.0f} s)"))
    sides = {side: json.loads((args.work / f"{side}.json").read_text())
             for side in SIDES if (args.work / f"{side}.json").exists()}
    print_summary(sides, console)
    if args.json:
        args.json.write_text(json.dumps({"summary": summarise(sides), "levels": by_level(sides), "agreement": agreement(sides),
                                         "cpu_by_process": cpu_by_process(sides), "sides": sides},
                                        indent=1))
    if any(not side.get("finished", True) for side in sides.values() if side["side"] in sides_now):
        # A side cut at the deadline still has evaluations running: leave them, not wait.
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
