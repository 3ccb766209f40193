"""`cudaagent bench`, `cudaagent leaderboard` and `cudaagent baselines`: their arguments. The
entry points (pyproject.toml, group `cudaagent.commands`) call the `register_*` functions; the
handlers, in commands.py, are imported only when a command runs, so `cudaagent --help` does not
load pandas or the harness."""

from __future__ import annotations

import argparse

from pytest_cudaagent.core.config import BASELINE_MODES
from pytest_cudaagent.options import add_eval_options

# Arguments that name files or folders: made absolute against the caller's directory before the
# command runs (pytest_cudaagent.records.user_paths).
PROBLEM_PATHS = ("kernelbench", "problems")


def register(subparsers) -> None:
    """All three, for a parser of this package's own (`python -m`, tests)."""
    register_bench(subparsers)
    register_leaderboard(subparsers)
    register_baselines(subparsers)


def _handler(name: str):
    """commands.<name>, imported when the command runs."""
    def run(args) -> int:
        from . import commands

        return getattr(commands, name)(args)
    return run


def _shard(text: str):
    """--shard I/N, checked while the arguments are parsed (before anything loads torch)."""
    from .shards import parse_shard

    try:
        return parse_shard(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--shard ")) from None


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


def register_bench(subparsers) -> None:
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
    parser.add_argument("--out", default="bench-out", metavar="DIR", help="output directory (default bench-out)")
    parser.add_argument("--shard", type=_shard, metavar="I/N",
                        help="evaluate only shard I of N (0 <= I < N): the problems whose name hashes to I, "
                             "with all their candidates; one host each, merged by `cudaagent leaderboard` "
                             "(docs/multi-node.md)")
    parser.add_argument("--resume", action="store_true", help="skip pairs already in OUT/results.jsonl")
    parser.add_argument("--overwrite", action="store_true", help="discard OUT/results.jsonl and start again")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="pytest-xdist workers (default: one per CPU core, at least 2 and at most 16 per GPU)")
    # The evaluator's options, as verify's and the plugin's (pytest_cudaagent.options); bench
    # builds fast by default (--no-fast-build turns it off).
    add_eval_options(parser.add_argument)
    parser.add_argument("--no-shared-reference", action="store_true",
                        help="draw each candidate's own reference (seed, weights, correctness inputs) instead of "
                             "one per problem shared by the run's candidates in a worker (README, Where an "
                             "evaluation's time goes)")
    parser.add_argument("--no-start-ahead", action="store_true",
                        help="start each candidate's build only when its own evaluation begins, not while the "
                             "worker's previous candidate is checked and timed (README, Where an evaluation's "
                             "time goes)")
    parser.set_defaults(func=_handler("run_bench"), path_args=(*PROBLEM_PATHS, "candidates", "out"))


def register_leaderboard(subparsers) -> None:
    parser = subparsers.add_parser(
        "leaderboard", help="fast_p, speedups and rewards per run and level from results JSONL files",
        description="Reads results written by `cudaagent bench` (one JSONL per run; several runs "
                    "are shown side by side with the problems that changed). The shard files of one "
                    "`bench --shard I/N` run are merged into one run: shards of different settings "
                    "are refused (exit 2), a missing shard or pair is named (exit 1, the leaderboard "
                    "still written).")
    parser.add_argument("results", nargs="+", help="results.jsonl files, one per run (or per shard)")
    parser.add_argument("--out", metavar="DIR",
                        help="write leaderboard.md, leaderboard.csv, problems.csv and report.html here "
                             "(default: print the markdown)")
    parser.set_defaults(func=_handler("run_leaderboard"), path_args=("results", "out"))


def register_baselines(subparsers) -> None:
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
    parser.add_argument("--compare-mode", choices=BASELINE_MODES,
                        help="the mode of a KernelBench --compare file (default: from its name)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="problems timed at once (default 4 on a GPU, 1 on the CPU where timings share the cores)")
    parser.set_defaults(func=_handler("run_baselines"), path_args=(*PROBLEM_PATHS, "out", "compare"))
