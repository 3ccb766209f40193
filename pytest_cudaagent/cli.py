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

from .core.config import (
    BACKEND_HELP,
    BACKEND_PRESETS,
    BASELINE_MODES,
    BUILD_TIMEOUT_HELP,
    CONVENTIONS,
    RUN_TIMEOUT_HELP,
    TOLERANCE_PRESETS,
    EvalConfig,
    timeout_overrides,
)
from .core.files import BadFileError, check_candidate, check_problem
from .core.result import Result
from .records.user_paths import command_paths
from .rules.rules import POLICY_NAMES
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
    parser.add_argument("--device", choices=("cuda", "cpu", "auto"), default="auto")
    parser.add_argument("--trials", type=int, default=5, help="correctness trials with fresh inputs (default 5)")
    parser.add_argument("--baselines", default="eager,compile",
                        help="comma-separated: eager, compile, max-autotune; empty for none")
    parser.add_argument("--no-timing", action="store_true", help="check correctness only")
    parser.add_argument("--policy", choices=POLICY_NAMES, default="strict",
                        help="strict (the paper's rules), permissive (KernelBench's) or calibration (the reference as its own candidate)")
    parser.add_argument("--tolerance", choices=sorted(TOLERANCE_PRESETS), default="default",
                        help="default: fp32 at 1e-2 (KernelBench v0.1, the paper); kernelbench-main: fp32 at 1e-4; strict")
    parser.add_argument("--convention", choices=CONVENTIONS, default="kernelbench",
                        help="kernelbench (default): both models as constructed, built after the same seed; "
                             "cuda-agent: eval mode, strict state_dict load (README, Conventions)")
    parser.add_argument("--backend", choices=BACKEND_PRESETS, default="pytorch-default", help=BACKEND_HELP)
    parser.add_argument("--audit-timed-calls", action="store_true",
                        help="run the operator audit on every timed call too (adds ~25 us per call on an H100)")
    parser.add_argument("--count-launch", action="store_true",
                        help="synchronise before each timed call, so the host's launch time is counted "
                             "(default: hidden under the L2 flush when all work is on one stream)")
    parser.add_argument("--require-sandbox", action="store_true",
                        help="refuse to run (exit 2) unless the candidate can be fully sandboxed here "
                             "(namespaces, Landlock, rlimits, a process limit; README, Isolation)")
    parser.add_argument("--timeout", type=float, metavar="S", help=RUN_TIMEOUT_HELP)
    parser.add_argument("--build-timeout", type=float, metavar="S", help=BUILD_TIMEOUT_HELP)
    parser.add_argument("--output", help="write the Result as JSON to this file")
    parser.add_argument("--json", action="store_true", help="print the Result as JSON instead of the summary")
    parser.set_defaults(func=run_verify, path_args=("problem", "candidate", "output"))


def run_verify(args) -> int:
    paths = command_paths(args)
    if args.trials < 1:
        print("cudaagent verify: --trials must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    baselines = tuple(name.strip() for name in args.baselines.split(",") if name.strip())
    unknown = set(baselines) - set(BASELINE_MODES)
    if unknown:
        print(f"cudaagent verify: unknown baseline(s) {sorted(unknown)}; use {', '.join(BASELINE_MODES)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        timeouts = timeout_overrides(args.timeout, args.build_timeout)
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
    config = EvalConfig(device=args.device, trials=args.trials, timing=not args.no_timing,
                        baselines=baselines, policy=args.policy, tolerance=args.tolerance,
                        convention=args.convention, backend=args.backend, require_sandbox=args.require_sandbox)
    for field_name, seconds in timeouts.items():
        setattr(config, field_name, seconds)
    config.timing_config.audit_timed_calls = args.audit_timed_calls
    config.timing_config.overlap_launch = not args.count_launch
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
    args = build_parser(argv).parse_args(argv)
    start_run(["cudaagent", *(sys.argv[1:] if argv is None else argv)])  # waits.py: whose run holds a lock
    # Before any command runs elsewhere (a pytest subprocess, a workspace): paths are the caller's.
    command_paths(args)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
