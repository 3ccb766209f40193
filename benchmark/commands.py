"""The handlers of `cudaagent bench`, `cudaagent leaderboard` and `cudaagent baselines` (their
arguments: cli.py). Each returns the exit code; paths arrive absolute, and messages show them as
typed (`args.paths`)."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import sys
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pytest_cudaagent.core.config import BASELINE_MODES, EvalConfig, resolve_device
from pytest_cudaagent.core.files import BadFileError
from pytest_cudaagent.options import eval_config, namespace_values
from pytest_cudaagent.records.user_paths import command_paths
from pytest_cudaagent.system.cores import usable_cores
from pytest_cudaagent.system.lifetime import stop_on_sigterm
from pytest_cudaagent.terminal import console as console_for_output
from pytest_cudaagent.workers.sandbox import SandboxUnavailable, require_sandbox

from .batch import (
    PYTEST_RAN,
    BatchError,
    BatchInterrupted,
    BatchSettings,
    batch_device,
    gpu_count,
    log_tail,
    run_batch,
)
from .kernelbench import EXAMPLES_PROBLEMS, Problem, load_flat, load_kernelbench, select
from .leaderboard import Leaderboard, to_markdown
from .reports import write_reports
from .shards import Shard, problem_key, read_run_file, shard_of, shard_of_run, write_run_file
from .solutions import pair_solutions

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXAMPLES_CANDIDATES = EXAMPLES_PROBLEMS.parent / "candidates"
# The leaderboard columns that fit a terminal; the files have them all.
TERMINAL_COLUMNS = ("run", "level", "problems", "candidates", "correct (fast_0) %", "fast_1 vs eager %",
                    "fast_1 vs compile %", "geomean vs compile (correct)", "mean reward", "flagged for review")


class UsageError(Exception):
    """Bad arguments or inputs; the message says what to give instead."""


def comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def ids(text: str) -> list[int]:
    """"3", "1,4,9" or "1-10"."""
    found = []
    for item in comma_list(text):
        low, _, high = item.partition("-")
        found += list(range(int(low), int(high) + 1)) if high else [int(low)]
    return found


# -- problem selection and baseline modes, shared by bench and baselines ----------------------


def _problems(args, materialize_dir: Path) -> list[Problem]:
    if args.kernelbench and args.problems:
        raise UsageError("give --kernelbench or --problems, not both")
    try:
        if args.kernelbench:
            problems = load_kernelbench(args.kernelbench, materialize_dir)
        else:
            problems = load_flat(args.problems or EXAMPLES_PROBLEMS)
        levels = [level for item in args.level for level in comma_list(item)]
        problem_ids = [number for item in args.problem_id for number in ids(item)]
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None
    chosen = select(problems, levels, problem_ids, args.name)
    if not chosen:
        raise UsageError(f"no problems left after selection (from {len(problems)}); check --level, "
                         "--problem-id and --name")
    return chosen


def _baseline_modes(text: str) -> tuple[str, ...]:
    modes = tuple(comma_list(text))
    unknown = set(modes) - set(BASELINE_MODES)
    if unknown:
        raise UsageError(f"unknown baseline(s) {sorted(unknown)}; use {', '.join(BASELINE_MODES)}")
    return modes


def print_frame(frame: pd.DataFrame, title: str, console: Console) -> None:
    table = Table(*[str(column) for column in frame.columns], title=title)
    for row in frame.itertuples(index=False):
        table.add_row(*["-" if isinstance(v, float) and math.isnan(v) else
                        (f"{v:g}" if isinstance(v, float) else str(v)) for v in row])
    console.print(table)


def _handle(handler):
    """Usage errors become exit code 2 with the message, its paths as the user typed them."""
    def run(args) -> int:
        paths = command_paths(args)
        try:
            return handler(args)
        except (UsageError, BadFileError, BatchError, SandboxUnavailable) as error:
            console_for_output(stderr=True).print(f"[red]cudaagent {getattr(args, 'command', '')}:[/] {paths.shown(str(error))}",
                                       highlight=False, soft_wrap=True)
            return EXIT_USAGE
        except BatchInterrupted as stop:
            console_for_output(stderr=True).print(interrupted_summary(stop, paths.shown), highlight=False, soft_wrap=True)
            return stop.signal_exit
    return run


def interrupted_summary(stop: BatchInterrupted, shown, argv: list[str] | None = None) -> str:
    """One line for a run ended by Ctrl-C or SIGTERM: what is done, what is left, where the
    results are, and the command that goes on (the same one with --resume)."""
    words = [word for word in (sys.argv[1:] if argv is None else argv) if word != "--overwrite"]
    if "--resume" not in words:
        words.append("--resume")
    return (f"interrupted: {stop.done} of {stop.todo} pair(s) done, {stop.todo - stop.done} left; results in "
            f"{shown(str(stop.results_path))}; go on with: {shlex.join(['cudaagent', *words])}")


# -- bench -----------------------------------------------------------------------------------


def bench_config(args) -> EvalConfig:
    """The EvalConfig of the run, from the evaluator's options (pytest_cudaagent.options) over
    bench's own default: the shared precompiled header on (a batch amortises it)."""
    try:
        return eval_config(namespace_values(args), EvalConfig(fast_build=True))
    except ValueError as error:
        raise UsageError(str(error)) from None


def default_candidates(device: str) -> Path:
    return EXAMPLES_CANDIDATES / ("cuda" if device == "cuda" else "cpu")


@_handle
def run_bench(args) -> int:
    console, shown = console_for_output(), args.paths.shown
    stop_on_sigterm()
    config = bench_config(args)
    if config.require_sandbox:
        require_sandbox()  # before any work, so a refusal costs nothing
    out_dir = Path(args.out)
    if args.resume and args.overwrite:
        raise UsageError("--resume and --overwrite contradict each other; pick one")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    problems = _problems(args, out_dir / "problems")
    device = batch_device(config.device)
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
    keys = {problem.path: problem_key(problem.level, problem.name) for problem in problems}
    if pairing.unmatched:
        console.print(f"[yellow]{len(pairing.unmatched)} candidate(s) in {shown(str(candidates))} match no selected problem, "
                      f"e.g. {pairing.unmatched[0].name}[/]", highlight=False)
    if not pairing.pairs:
        raise UsageError(f"no candidate in {candidates} pairs with the {len(problems)} problem(s); name them "
                         "level_<L>_problem_<N>_sample_<K>_kernel.py (KernelBench) or <problem stem>[_sample_<K>].py")
    results_path = out_dir / "results.jsonl"
    _check_same_shard(args, results_path)
    if args.overwrite and results_path.exists():
        results_path.unlink()
    # Every problem's pairs are found first, so that none of another shard counts as unmatched.
    pairs = shard_pairs(pairing.pairs, keys, args.shard)
    settings = BatchSettings(config=dataclasses.replace(config, device=device), workers=args.workers,
                             share_reference=not args.no_shared_reference, start_ahead=not args.no_start_ahead)
    write_run_file(results_path, args.shard, list(keys.values()),
                   [(keys[pair.problem], pair.problem, pair.candidate) for pair in pairs],
                   _verdict_settings(settings, args))
    if args.shard is not None:
        held = sum(shard_of(key, args.shard.count) == args.shard.index for key in keys.values())
        console.print(f"shard {args.shard}: {len(pairs)} of {len(pairing.pairs)} pair(s), {held} of {len(problems)} "
                      "problem(s)", highlight=False)
        if not pairs:
            results_path.touch()  # an empty shard is done: the merge finds its file
            console.print(f"shard {args.shard} holds no pair; wrote an empty {shown(str(results_path))}", highlight=False)
            return EXIT_OK
    console.print(f"bench: {len(pairs)} pair(s) over {len(problems)} problem(s), candidates from "
                  f"{shown(str(candidates))}, device {device}", highlight=False)
    outcome = run_batch(pairs, results_path, settings, resume=args.resume, console=console)
    if args.resume:
        console.print(f"resume: skipped {outcome.skipped} of {outcome.planned} pair(s) already done in "
                      f"{shown(str(results_path))}", highlight=False)
    if outcome.pytest_exit is not None:
        console.print(f"evaluated {len(outcome.new_results)} pair(s) with {outcome.workers} worker(s); "
                      f"pytest log: {shown(str(outcome.log_path))}", highlight=False)
    exit_code = EXIT_OK
    if outcome.unreported:
        console.print(f"[red]{len(outcome.unreported)} pair(s) gave no Result of their own (their pytest worker "
                      f"ended): recorded as harness_error, evaluated again with --resume; see "
                      f"{shown(str(outcome.log_path))}[/]", highlight=False)
        exit_code = EXIT_FAILED
    harness_errors = [result for result in outcome.new_results if result.status == "harness_error"]
    if harness_errors:
        console.print(f"[red]{len(harness_errors)} harness error(s) (ours, not the candidates'): e.g. "
                      f"{escape(harness_errors[0].error or '')}; --resume evaluates them again[/]", highlight=False)
    if outcome.pytest_exit not in (None, *PYTEST_RAN) or outcome.missing:
        console.print(f"[red]{outcome.missing} pair(s) gave no Result (pytest exit {outcome.pytest_exit}); "
                      f"the tail of {shown(str(outcome.log_path))}:[/]\n{log_tail(outcome.log_path)}", highlight=False)
        exit_code = EXIT_FAILED
    if not results_path.exists():
        return EXIT_FAILED
    return max(exit_code, _write_leaderboard([results_path], out_dir, console, shown))


def shard_pairs(pairs: list, keys: dict[Path, str], shard: Shard | None) -> list:
    """The pairs whose problem's key (`keys`: problem path -> shards.problem_key) hashes to `shard`."""
    if shard is None:
        return list(pairs)
    return [pair for pair in pairs if shard_of(keys[pair.problem], shard.count) == shard.index]


def _check_same_shard(args, results_path: Path) -> None:
    """--resume goes on with the shard the folder holds, never another one."""
    record = read_run_file(results_path) if args.resume and results_path.exists() else None
    if record is None:
        return
    before = shard_of_run(record)
    if before != args.shard:
        raise UsageError(f"{results_path.parent} holds {'shard ' + str(before) if before else 'an unsharded run'}, "
                         f"not {'shard ' + str(args.shard) if args.shard else 'an unsharded run'}: resume it as it was "
                         "started, or give another --out")


def _verdict_settings(settings: BatchSettings, args) -> dict:
    """What shards of one run must agree on (shards.VERDICT_SETTINGS), from the run's settings;
    the timeouts as given (None: the default)."""
    config = settings.config
    return {"device": config.device, "policy": config.policy, "tolerance": config.tolerance,
            "convention": config.convention, "backend": config.backend, "trials": config.trials,
            "timing": config.timing, "baselines": list(config.baselines) if config.timing else [],
            "memory_policy": config.memory_policy,
            "run_timeout_s": config.run_timeout_s if args.timeout is not None else None,
            "build_timeout_s": config.build_timeout_s if args.build_timeout is not None else None}


def _write_leaderboard(results: list[Path], out_dir: Path, console: Console, shown) -> int:
    return _write_board(_board(results), out_dir, console, shown)


def _write_board(board: Leaderboard, out_dir: Path, console: Console, shown) -> int:
    paths = write_reports(board, out_dir)
    print_frame(board.summary[[column for column in TERMINAL_COLUMNS if column in board.summary]],
                "leaderboard (all columns in leaderboard.md)", console)
    for line in flagged_lines(board):
        console.print(f"[yellow]{escape(line)}[/]", highlight=False, soft_wrap=True)
    console.print("wrote " + ", ".join(shown(str(path)) for path in paths.values()), highlight=False, soft_wrap=True)
    return EXIT_OK


def flagged_lines(board: Leaderboard) -> list[str]:
    """Why rows are missing from the headline numbers, one line per rule with an example detail,
    so a newcomer who counts fewer candidates than pairs reads why without opening a file."""
    flagged = board.flagged
    if flagged.empty:
        return []
    lines = []
    for rule, rows in flagged.groupby("rule", sort=True):
        lines.append(f"{len(rows)} result(s) left out of the numbers above for review, {rule}: "
                     f"{rows['detail'].iloc[0]} (all of them under 'Flagged for review' in leaderboard.md)")
    return lines


def _board(results: list[Path]) -> Leaderboard:
    try:
        return Leaderboard.from_files(results)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None


def _report_missing(board: Leaderboard, shown) -> int:
    """A merge that lacks shards or pairs says which, and exits 1 (its leaderboard is still written)."""
    if not board.missing:
        return EXIT_OK
    console = console_for_output(stderr=True)
    console.print(f"[red]missing from these results ({len(board.missing)}):[/]", highlight=False)
    for line in board.missing:
        console.print(f"[red]  {escape(shown(line))}[/]", highlight=False, soft_wrap=True)
    return EXIT_FAILED


# -- leaderboard -----------------------------------------------------------------------------


@_handle
def run_leaderboard(args) -> int:
    paths = [Path(path) for path in args.results]
    board = _board(paths)
    if args.out:
        _write_board(board, Path(args.out), console_for_output(), args.paths.shown)
    else:
        print(to_markdown(board))
    return _report_missing(board, args.paths.shown)


# -- baselines -------------------------------------------------------------------------------


@_handle
def run_baselines(args) -> int:
    # Here, not at the top: it loads torch, which `bench` and `leaderboard` never need in this process.
    from .baselines import compare, geomean_ratio, time_baselines, to_json_record

    console, shown = console_for_output(), args.paths.shown
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
    workers = args.workers or (min(4, usable_cores()) if device == "cuda" else 1)
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
    console.print(f"wrote {shown(str(out_path))}", highlight=False)
    if args.compare:
        table = compare(record, Path(args.compare), args.compare_mode)
        if table.empty:
            console.print(f"[yellow]no problem of {shown(str(out_path))} is in {shown(args.compare)}[/]", highlight=False)
        else:
            print_frame(table, f"our mean / {Path(args.compare).name} (above 1: slower here)", console)
            print_frame(geomean_ratio(table), "geomean ratio", console)
    failed = [item for item in found if item.error]
    return EXIT_FAILED if failed else EXIT_OK
