"""`cudaagent bench`, `cudaagent leaderboard` and `cudaagent baselines`. `register(subparsers)`
adds them to the `cudaagent` command; each handler returns the exit code."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from pytest_cudaagent.config import BACKEND_HELP, BACKEND_PRESETS, EvalConfig
from pytest_cudaagent.files import BadFileError

from .baselines import MODES, compare, geomean_ratio, time_baselines, to_json_record
from .batch import (
    PYTEST_RAN,
    BatchError,
    BatchSettings,
    gpu_count,
    log_tail,
    resolve_device,
    run_batch,
)
from .kernelbench import EXAMPLES_PROBLEMS, Problem, load_flat, load_kernelbench, select
from .leaderboard import Leaderboard, to_markdown, write_reports
from .solutions import pair_solutions

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXAMPLES_CANDIDATES = EXAMPLES_PROBLEMS.parent / "candidates"
# The leaderboard columns that fit a terminal; the files have them all.
TERMINAL_COLUMNS = ("run", "level", "problems", "candidates", "correct (fast_0) %", "fast_1 vs eager %",
                    "fast_1 vs compile %", "geomean vs compile (correct)", "mean reward")


class UsageError(Exception):
    """Bad arguments or inputs; the message says what to give instead."""


def register(subparsers) -> None:
    _add_bench(subparsers)
    _add_leaderboard(subparsers)
    _add_baselines(subparsers)


# -- arguments shared by bench and baselines ---------------------------------------------------


def _comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _ids(text: str) -> list[int]:
    """"3", "1,4,9" or "1-10"."""
    ids = []
    for item in _comma_list(text):
        low, _, high = item.partition("-")
        ids += list(range(int(low), int(high) + 1)) if high else [int(low)]
    return ids


def _add_problem_selection(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("problems (default: the bundled examples)")
    group.add_argument("--kernelbench", metavar="PATH",
                       help="a KernelBench clone, or its dataset files (parquet/JSON/JSONL, file or directory)")
    group.add_argument("--problems", metavar="DIR", help="a flat directory of problem files")
    group.add_argument("--level", action="append", default=[], metavar="L",
                       help="only these levels (repeat or comma-separate: --level 1,2)")
    group.add_argument("--problem-id", action="append", default=[], metavar="IDS",
                       help="only these KernelBench problem ids (e.g. 1,4 or 1-10)")
    group.add_argument("--name", metavar="PATTERN", help="only problem files whose name matches (glob, or a word)")


def _problems(args, materialize_dir: Path) -> list[Problem]:
    if args.kernelbench and args.problems:
        raise UsageError("give --kernelbench or --problems, not both")
    try:
        if args.kernelbench:
            problems = load_kernelbench(args.kernelbench, materialize_dir)
        else:
            problems = load_flat(args.problems or EXAMPLES_PROBLEMS)
        levels = [level for item in args.level for level in _comma_list(item)]
        ids = [number for item in args.problem_id for number in _ids(item)]
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None
    chosen = select(problems, levels, ids, args.name)
    if not chosen:
        raise UsageError(f"no problems left after selection (from {len(problems)}); check --level, "
                         "--problem-id and --name")
    return chosen


def _baseline_modes(text: str) -> tuple[str, ...]:
    modes = tuple(_comma_list(text))
    unknown = set(modes) - set(MODES)
    if unknown:
        raise UsageError(f"unknown baseline(s) {sorted(unknown)}; use {', '.join(MODES)}")
    return modes


def print_frame(frame: pd.DataFrame, title: str, console: Console) -> None:
    table = Table(*[str(column) for column in frame.columns], title=title)
    for row in frame.itertuples(index=False):
        table.add_row(*["-" if isinstance(v, float) and math.isnan(v) else
                        (f"{v:g}" if isinstance(v, float) else str(v)) for v in row])
    console.print(table)


def _handle(handler):
    """Usage errors become exit code 2 with the message."""
    def run(args) -> int:
        try:
            return handler(args)
        except (UsageError, BadFileError, BatchError) as error:
            Console(stderr=True).print(f"[red]cudaagent {getattr(args, 'command', '')}:[/] {error}", highlight=False,
                                        soft_wrap=True)
            return EXIT_USAGE
    return run


# -- bench -----------------------------------------------------------------------------------


def _add_bench(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="evaluate a set of candidates in parallel and write results and leaderboards",
        description="Evaluates every (problem, candidate) pair through the pytest plugin under "
                    "pytest-xdist, appends each Result to OUT/results.jsonl as it finishes, then "
                    "writes OUT/leaderboard.md, leaderboard.csv and report.html. With no arguments: "
                    "the bundled examples, on the GPU if there is one, else on the CPU.")
    _add_problem_selection(parser)
    parser.add_argument("--candidates", metavar="DIR",
                        help="candidates named level_<L>_problem_<N>_sample_<K>[_kernel].py, <stem>.py, "
                             "<stem>_sample_<K>.py, or workspace directories named so "
                             "(default: examples/candidates/cuda on a GPU, else examples/candidates/cpu)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--out", default="bench-out", metavar="DIR", help="output directory (default bench-out)")
    parser.add_argument("--resume", action="store_true", help="skip pairs already in OUT/results.jsonl")
    parser.add_argument("--overwrite", action="store_true", help="discard OUT/results.jsonl and start again")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="pytest-xdist workers (default: 2 per GPU, more while CPU cores can take builds)")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials per candidate (default 5)")
    parser.add_argument("--baselines", default="eager,compile",
                        help="baselines to time once per problem: eager, compile, max-autotune (comma-separated)")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--policy", choices=("strict", "permissive"), default="strict")
    parser.add_argument("--tolerance", choices=("default", "strict"), default="default")
    parser.add_argument("--backend", choices=BACKEND_PRESETS, default="pytorch-default", help=BACKEND_HELP)
    parser.set_defaults(func=_handle(run_bench))


def default_candidates(device: str) -> Path:
    return EXAMPLES_CANDIDATES / ("cuda" if device == "cuda" else "cpu")


def run_bench(args) -> int:
    console = Console()
    out_dir = Path(args.out)
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite contradict each other; pick one")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    problems = _problems(args, out_dir / "problems")
    device = resolve_device(args.device)
    if args.candidates:
        candidates = Path(args.candidates)
    elif args.kernelbench or args.problems:
        raise UsageError("--candidates DIR is needed with --kernelbench or --problems")
    else:
        candidates = default_candidates(device)
    try:
        pairing = pair_solutions(problems, candidates)
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
    if pairing.unmatched:
        console.print(f"[yellow]{len(pairing.unmatched)} candidate(s) in {candidates} match no selected problem, "
                      f"e.g. {pairing.unmatched[0].name}[/]", highlight=False)
    if not pairing.pairs:
        raise UsageError(f"no candidate in {candidates} pairs with the {len(problems)} problem(s); name them "
                         "level_<L>_problem_<N>_sample_<K>_kernel.py (KernelBench) or <problem stem>[_sample_<K>].py")
    results_path = out_dir / "results.jsonl"
    if args.overwrite and results_path.exists():
        results_path.unlink()
    settings = BatchSettings(device=device, workers=args.workers, trials=args.trials,
                             baselines=_baseline_modes(args.baselines), timing=not args.no_timing,
                             policy=args.policy, tolerance=args.tolerance, backend=args.backend)
    console.print(f"bench: {len(pairing.pairs)} pair(s) over {len(problems)} problem(s), candidates from "
                  f"{candidates}, device {device}", highlight=False)
    outcome = run_batch(pairing.pairs, results_path, settings, resume=args.resume, console=console)
    if args.resume:
        console.print(f"resume: skipped {outcome.skipped} of {outcome.planned} pair(s) already done in "
                      f"{results_path}", highlight=False)
    if outcome.pytest_exit is not None:
        console.print(f"evaluated {len(outcome.new_results)} pair(s) with {outcome.workers} worker(s); "
                      f"pytest log: {outcome.log_path}", highlight=False)
    exit_code = EXIT_OK
    if outcome.pytest_exit not in (None, *PYTEST_RAN) or outcome.missing:
        console.print(f"[red]{outcome.missing} pair(s) gave no Result (pytest exit {outcome.pytest_exit}); "
                      f"the tail of {outcome.log_path}:[/]\n{log_tail(outcome.log_path)}", highlight=False)
        exit_code = EXIT_FAILED
    if not results_path.exists():
        return EXIT_FAILED
    return max(exit_code, _write_leaderboard([results_path], out_dir, console))


def _write_leaderboard(results: list[Path], out_dir: Path, console: Console) -> int:
    try:
        board = Leaderboard.from_files(results)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None
    paths = write_reports(board, out_dir)
    print_frame(board.summary[[column for column in TERMINAL_COLUMNS if column in board.summary]],
                "leaderboard (all columns in leaderboard.md)", console)
    console.print("wrote " + ", ".join(str(path) for path in paths.values()), highlight=False)
    return EXIT_OK


# -- leaderboard -----------------------------------------------------------------------------


def _add_leaderboard(subparsers) -> None:
    parser = subparsers.add_parser(
        "leaderboard", help="fast_p, speedups and rewards per run and level from results JSONL files",
        description="Reads results written by `cudaagent bench` (one JSONL per run; several runs "
                    "are shown side by side with the problems that changed).")
    parser.add_argument("results", nargs="+", help="results.jsonl files, one per run")
    parser.add_argument("--out", metavar="DIR",
                        help="write leaderboard.md, leaderboard.csv, problems.csv and report.html here "
                             "(default: print the markdown)")
    parser.set_defaults(func=_handle(run_leaderboard))


def run_leaderboard(args) -> int:
    paths = [Path(path) for path in args.results]
    if args.out:
        return _write_leaderboard(paths, Path(args.out), Console())
    try:
        print(to_markdown(Leaderboard.from_files(paths)))
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None
    return EXIT_OK


# -- baselines -------------------------------------------------------------------------------


def _add_baselines(subparsers) -> None:
    parser = subparsers.add_parser(
        "baselines", help="time eager, torch.compile and max-autotune for a problem set on this machine",
        description="Stores mean/std/min/max/median ms per problem as JSON keyed by mode, level and "
                    "problem file name (KernelBench's layout), with the GPU, torch version and date.")
    _add_problem_selection(parser)
    parser.add_argument("--modes", default="eager,compile,max-autotune",
                        help="comma-separated: eager, compile, max-autotune (default all three)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--out", default="baselines.json", metavar="FILE",
                        help="JSON to write; an existing file is updated (default baselines.json)")
    parser.add_argument("--compare", metavar="FILE",
                        help="a baseline JSON (KernelBench's per-mode files or ours): print our time / theirs per problem")
    parser.add_argument("--compare-mode", choices=MODES,
                        help="the mode of a KernelBench --compare file (default: from its name)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="problems timed at once (default 4 on a GPU, 1 on the CPU where timings share the cores)")
    parser.set_defaults(func=_handle(run_baselines))


def run_baselines(args) -> int:
    console = Console()
    out_path = Path(args.out)
    modes = _baseline_modes(args.modes)
    if not modes:
        raise UsageError("--modes is empty; give eager, compile and/or max-autotune")
    if args.compare and not Path(args.compare).is_file():
        raise UsageError(f"{args.compare}: no such baseline file to compare with")
    device = resolve_device(args.device)
    if device == "cuda" and not gpu_count():
        raise UsageError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu")
    problems = _problems(args, out_path.parent / f".{out_path.stem}-problems")
    workers = args.workers or (min(4, os.cpu_count() or 1) if device == "cuda" else 1)
    config = EvalConfig(device=device, baselines=modes)
    console.print(f"baselines: {len(problems)} problem(s), modes {', '.join(modes)}, device {device}", highlight=False)

    def report(found) -> None:
        times = ", ".join(f"{mode} {stats.mean:.4g} ms" for mode, stats in found.stats.items())
        console.print(f"{found.problem.level_key}/{found.problem.name}: {found.error or times}", highlight=False)

    found = time_baselines(problems, modes, config, device, workers, on_done=report)
    previous = json.loads(out_path.read_text()) if out_path.is_file() else None
    record = to_json_record(found, device, config, previous)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(record, indent=1))
    console.print(f"wrote {out_path}", highlight=False)
    if args.compare:
        table = compare(record, Path(args.compare), args.compare_mode)
        if table.empty:
            console.print(f"[yellow]no problem of {out_path} is in {args.compare}[/]", highlight=False)
        else:
            print_frame(table, f"our mean / {Path(args.compare).name} (above 1: slower here)", console)
            print_frame(geomean_ratio(table), "geomean ratio", console)
    failed = [item for item in found if item.error]
    return EXIT_FAILED if failed else EXIT_OK
