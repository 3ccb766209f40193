"""The `cudaagent` command. Its subcommands are entry points of the group `cudaagent.commands`
(pyproject.toml): each names a `register(subparsers)` function in the package that owns the
command (`verify` is this one's). Only the command named on the command line is loaded, so
`cudaagent verify` imports nothing of benchmark, policy or synthesis, and a command whose
package needs an optional extra says which one instead of failing on an import."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .core.config import EvalConfig
from .core.files import BadFileError, check_candidate, check_problem
from .core.result import Result
from .options import add_eval_options, eval_config, namespace_values
from .records.user_paths import command_paths
from .system import start_trace
from .terminal import console as console_for_output
from .timing.waits import start_run
from .workers.sandbox import SandboxUnavailable


def evaluate(problem, candidate, config: EvalConfig) -> Result:
    """The evaluation core, imported when a command evaluates (it loads torch; `bench` and
    `leaderboard` never need it in this process)."""
    from .evaluation import evaluate as evaluate_pair

    return evaluate_pair(problem, candidate, config)

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
COMMANDS_GROUP = "cudaagent.commands"
# The order `cudaagent --help` lists the commands in (installed metadata sorts them by name);
# a command not named here comes last.
HELP_ORDER = ("verify", "bench", "leaderboard", "baselines", "synth", "solve", "train")


def render_result(result: Result, console: Console) -> None:
    colour = "green" if result.passed else "red"
    console.print(f"[bold {colour}]{result.status.upper()}[/]  reward {result.reward:g}  "
                  f"{Path(result.problem).name} <- {Path(result.candidate).name}  ({result.device}, "
                  f"convention {result.convention})")
    if result.error and not result.passed:
        # Free text (compiler output, tracebacks): never read as markup, never re-wrapped.
        console.print(f"  {result.error}", markup=False, highlight=False, soft_wrap=True)
    for violation in result.violations:
        console.print(f"  [red]violation[/] [{violation.rule}] {violation.detail}")
    for warning in result.warnings:
        console.print(f"  [yellow]warning[/] [{warning.rule}] {warning.detail}")
    if result.trials:
        trials = Table("trial", "ok", "max abs err", "max rel err", "mismatches", title="correctness")
        for trial in result.trials:
            trials.add_row(str(trial.index), "yes" if trial.correct else "NO",
                           _number(trial.max_abs_error), _number(trial.max_rel_error),
                           f"{trial.mismatches}/{trial.numel}" if trial.numel else (trial.error or ""))
        console.print(trials)
    if result.timing:
        timing = Table("what", "median ms", "IQR ms", "samples", "device ms", title="timing")
        for name, stats in result.timing.items():
            timing.add_row(name, f"{stats.median_ms:.4f}", f"{stats.iqr_ms:.4f}", str(stats.samples),
                           _number(stats.device_ms))
        console.print(timing)
    speedups = [f"{result.speedup_vs_eager:.3f}x vs eager" if result.speedup_vs_eager else "",
                f"{result.speedup_vs_compile:.3f}x vs compile" if result.speedup_vs_compile else ""]
    if any(speedups):
        console.print("  speedup: " + ", ".join(s for s in speedups if s))
    if result.precision:
        console.print("  precision: " + "; ".join(result.precision))
    if result.status in ("build_error", "crashed", "runtime_error") and result.log \
            and not _log_repeats_error(result.error, result.log[-2000:]):
        console.print("  --- candidate log (tail) ---")
        console.print(result.log[-2000:], markup=False, highlight=False, soft_wrap=True)


def _log_repeats_error(error: str | None, log_tail: str) -> bool:
    """The log's tail adds nothing to the error printed above it: a build error's compiler
    output is both the error and the end of the log, and is printed once."""
    # The first line carries our prefix ("build failed: RuntimeError: ..."); the lines after it
    # are the compiler's own.
    last_lines = [line.strip() for line in (error or "").splitlines()[1:] if line.strip()][-3:]
    return bool(last_lines) and all(line in log_tail for line in last_lines)


def _number(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def register(subparsers) -> None:
    """`cudaagent verify` (entry point `verify`)."""
    parser = subparsers.add_parser("verify", help="verify and time one candidate against its problem")
    parser.add_argument("problem", help="problem .py (Model, get_inputs, get_init_inputs)")
    parser.add_argument("candidate", help="candidate .py (ModelNew) or CUDA-Agent workspace directory")
    add_eval_options(parser.add_argument)  # options.py: the same for bench and the pytest plugin
    parser.add_argument("--output", help="write the Result as JSON to this file")
    parser.add_argument("--json", action="store_true", help="print the Result as JSON instead of the summary")
    parser.set_defaults(func=run_verify, path_args=("problem", "candidate", "output"))


def run_verify(args) -> int:
    paths = command_paths(args)
    try:
        config = eval_config(namespace_values(args))
    except ValueError as error:
        print(f"cudaagent verify: {error}", file=sys.stderr)
        return EXIT_USAGE
    # The files checked here, before the evaluation core (and torch, seconds to import) is loaded.
    try:
        check_problem(args.problem)
        check_candidate(args.candidate)
    except BadFileError as error:
        print(f"cudaagent verify: {paths.shown(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = evaluate(args.problem, args.candidate, config)
    except (BadFileError, SandboxUnavailable) as error:
        print(f"cudaagent verify: {paths.shown(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(result.to_json(indent=1) + "\n")
    if args.json:
        print(result.to_json(indent=1))
    else:
        render_result(result, console_for_output())
    return EXIT_PASSED if result.passed else EXIT_FAILED


def require_extra(command: str, extra: str, *modules: str) -> None:
    """Exits 2 with one line naming the pip extra when one of `modules` cannot be imported; a
    command calls it before the code that needs them."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            print(f"cudaagent {command} needs the {extra} extra: pip install 'cuda-agent[{extra}]'",
                  file=sys.stderr)
            raise SystemExit(EXIT_USAGE) from None


def command_entry_points(wanted: str | None = None) -> list[importlib.metadata.EntryPoint]:
    """The registered commands, in HELP_ORDER: only `wanted` when it is one of them."""
    found = sorted(importlib.metadata.entry_points(group=COMMANDS_GROUP),
                   key=lambda entry: (HELP_ORDER + (entry.name,)).index(entry.name))
    chosen = [entry for entry in found if entry.name == wanted]
    return chosen or found


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cudaagent", description="Check, time, benchmark and train agents that write CUDA kernels")
    subparsers = parser.add_subparsers(dest="command", required=True)
    argv = sys.argv[1:] if argv is None else argv
    first = next((word for word in argv if not word.startswith("-")), None)
    entries = command_entry_points(first)
    if not entries:
        parser.error(f"no {COMMANDS_GROUP} entry points are installed; reinstall the package "
                     "(pip install -e . in a checkout)")
    for entry in entries:
        entry.load()(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    start_trace.mark("cli.start", created=start_trace.created())
    args = build_parser(argv).parse_args(argv)
    start_run(["cudaagent", *(sys.argv[1:] if argv is None else argv)])  # waits.py: whose run holds a lock
    # Before any command runs elsewhere (a pytest subprocess, a workspace): paths are the caller's.
    command_paths(args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
