"""pytest plugin: one test item per (problem, candidate) pair, and a `cudaagent` fixture.

Hooks and options only; the work is `pytest_cudaagent.evaluation`, imported only where an item
runs (it loads torch: 5.5 s on the H100 machine, which xdist's controller never needs). Under
pytest-xdist each worker is pinned to one GPU before CUDA starts, and timings take a per-GPU lock
(locks.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import warnings
from pathlib import Path

import pytest

from .core.config import EvalConfig
from .core.files import BadFileError
from .core.result import Result
from .options import (
    EVAL_OPTIONS,
    NOT_SET,
    add_eval_options,
    eval_config,
    is_inline_config,
    load_config,
)
from .records.pairing import Pair, pair_directory
from .records.results_file import append_result, done_keys, record_missing
from .records.user_paths import TypedPaths
from .system import start_trace
from .system.gpu_pinning import pin_xdist_worker_to_gpu
from .system.lifetime import die_with_parent_from_env
from .timing.host_quiet import record_host
from .timing.waits import COMMAND_CHARS, RUN_COMMAND_ENV, run_id
from .workers import reused_reference, zygote
from .workers.sandbox import SandboxUnavailable, require_sandbox

# The run's options; the evaluator's (--cudaagent-trials, ...) are options.EVAL_OPTIONS, as verify's and bench's.
EVAL_PREFIX = "--cudaagent-"
_OPTIONS = [
    # (option, ini name, default, help)
    ("--cudaagent-problem", "cudaagent_problem", None, "a problem file (KernelBench format: Model, get_inputs, get_init_inputs)"),
    ("--cudaagent-candidate", "cudaagent_candidate", None, "a candidate file (class ModelNew) or workspace directory for --cudaagent-problem"),
    ("--cudaagent-problems", "cudaagent_problems", None, "a directory of problem files (directory mode)"),
    ("--cudaagent-candidates", "cudaagent_candidates", None, "a directory of candidates paired with the problems by file name"),
    ("--cudaagent-results", "cudaagent_results", None, "append every Result to this JSONL file as it finishes"),
    ("--cudaagent-resume", "cudaagent_resume", False, "skip pairs whose Result is already in --cudaagent-results"),
    ("--cudaagent-config", "cudaagent_config", None, "an EvalConfig as JSON (EvalConfig.to_dict, or part of it): a file, or the JSON itself. The run's evaluator settings whole (cudaagent bench passes its own so); an evaluator option given as well (--cudaagent-trials, ...) decides its own"),
    ("--cudaagent-reference-batch", "cudaagent_reference_batch", "", "an id: candidates of one pytest worker with it share each problem's reference (construction seed, weights, correctness inputs: drawn once; timed inputs stay fresh). Only for candidates all written before any is evaluated (cudaagent bench gives each run its own)"),
    ("--cudaagent-start-ahead", "cudaagent_start_ahead", False, "start a worker's next candidate (its sandbox and build) once its current one has built, while that one is checked and timed (README, Where an evaluation's time goes)"),
]
_FLAGS = {"--cudaagent-resume", "--cudaagent-start-ahead"}
_PATHS = ("--cudaagent-problem", "--cudaagent-candidate", "--cudaagent-problems", "--cudaagent-candidates",
          "--cudaagent-results", "--cudaagent-config")
RESULT_PROPERTY = "cudaagent_result"
PATHS = pytest.StashKey[tuple[dict, TypedPaths]]()
# The xdist controller's: the results file's size when the run began, and the pairs it runs.
RUN_START = pytest.StashKey[tuple[int, list]]()
# The session's EvalConfig, built once from the options (config_from_pytest).
EVAL_CONFIG = pytest.StashKey[EvalConfig]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cudaagent", "verify and time candidate kernels against their PyTorch reference")
    for option, ini_name, default, help_text in _OPTIONS:
        if option in _FLAGS:
            group.addoption(option, action="store_true", default=None, help=help_text)
            parser.addini(ini_name, help=help_text, type="bool", default=default)
        else:
            group.addoption(option, default=None, help=f"{help_text} (default: {default})")
            parser.addini(ini_name, help=help_text, default=default)
    add_eval_options(group.addoption, EVAL_PREFIX, parser.addini)


def _setting(config: pytest.Config, option: str):
    if option in _PATHS:
        return config.stash[PATHS][0][option]
    value = config.getoption(option.lstrip("-").replace("-", "_"))
    if value is None:
        ini_name = option.lstrip("-").replace("-", "_")
        value = config.getini(ini_name)
    return None if value is NOT_SET else value


def _absolute_paths(config: pytest.Config) -> tuple[dict, TypedPaths]:
    """The path options, absolute before any test can change directory: a command-line value
    against the directory pytest started in, an ini value against the ini file's directory
    (pytest's own rule for paths in ini files)."""
    typed = TypedPaths(config.invocation_params.dir)
    ini_dir = config.inipath.parent if config.inipath else config.rootpath
    values = {}
    for option in _PATHS:
        name = option.lstrip("-").replace("-", "_")
        given, from_ini = config.getoption(name), config.getini(name)
        values[option] = (given if given is not None and is_inline_config(given) else
                          typed.absolute(given) if given is not None else
                          from_ini if from_ini and is_inline_config(from_ini) else
                          typed.absolute(from_ini, ini_dir) if from_ini else None)
    return values, typed


def config_from_pytest(config: pytest.Config) -> EvalConfig:
    """The session's EvalConfig, built on its first use and kept: --cudaagent-config's (or
    EvalConfig's defaults) with every evaluator option given on the command line or in the ini
    file over it (options.eval_config), and --cudaagent-reference-batch. ValueError for a bad one."""
    if EVAL_CONFIG not in config.stash:
        config_option = _setting(config, "--cudaagent-config")
        base = load_config(config_option) if config_option else EvalConfig()
        built = eval_config({option.name: _setting(config, EVAL_PREFIX + option.name) for option in EVAL_OPTIONS},
                            base, EVAL_PREFIX)
        reference_batch = _setting(config, "--cudaagent-reference-batch")
        if reference_batch:
            built = dataclasses.replace(built, reference_batch=str(reference_batch))
        config.stash[EVAL_CONFIG] = built
    return config.stash[EVAL_CONFIG]


def pytest_configure(config: pytest.Config) -> None:
    start_trace.mark("pytest.configure", created=start_trace.created())
    # The run's CPUs and GPUs, recorded by the controller before xdist pins each worker to one
    # GPU and before any zygote starts (host_quiet.py: the cores kept for timed calls).
    record_host()
    # One run id and command for this run's processes (xdist workers inherit them), so a wait
    # for a lock names its holder as this run's or another's (waits.py).
    os.environ.setdefault(RUN_COMMAND_ENV, " ".join(["pytest", *config.invocation_params.args])[:COMMAND_CHARS])
    run_id()
    # Before anything in this worker starts CUDA: one GPU per xdist worker.
    pin_xdist_worker_to_gpu(xdist_worker_id(config))
    config.stash[PATHS] = _absolute_paths(config)
    config_file = _setting(config, "--cudaagent-config")
    if config_file and not is_inline_config(config_file) and not Path(config_file).is_file():
        raise pytest.UsageError(config.stash[PATHS][1].shown(
            f"--cudaagent-config {config_file}: no such file; write one from EvalConfig.to_dict()"))
    # A controller started by `cudaagent bench` dies with it, and xdist workers with their
    # controller, so no evaluation runs on after the run that asked for it is gone.
    die_with_parent_from_env()
    config.addinivalue_line("markers", "cudaagent: a candidate kernel evaluated against its problem")
    asks_for_pairs = _setting(config, "--cudaagent-problem") or _setting(config, "--cudaagent-problems")
    if asks_for_pairs:
        try:  # a bad setting is the run's usage error, not a failure of every pair without a row
            config_from_pytest(config)
        except (ValueError, TypeError) as error:
            raise pytest.UsageError(f"cudaagent: {error}") from None
    if asks_for_pairs and not is_xdist_controller(config):
        # The workers' zygote imports torch while this process starts and collects (zygote.py).
        zygote.prestart()
        # Its pairs come one after another: a reference's process may serve the next problem
        # (reused_reference.py; ended at the session's finish).
        reused_reference.allow()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Tells the evaluation core this worker's next pair, whose candidate then starts building
    once the current one has built (start_ahead.py). xdist hands a worker its next item before
    the current one runs, and never takes that one back (worksteal steals from the queue's end
    and leaves two)."""
    if not (isinstance(item, CandidateItem) and _setting(item.config, "--cudaagent-start-ahead")):
        return
    from .workers.start_ahead import state

    if isinstance(nextitem, CandidateItem):
        state().announce(nextitem.pair.problem, nextitem.pair.candidate, config_from_pytest(item.config))
    else:  # an evaluation that stopped before starting its next one leaves nothing behind
        state().clear_announced()


def pytest_collection_finish(session: pytest.Session) -> None:
    start_trace.mark("pytest.collected", items=len(session.items))


def pytest_sessionstart(session: pytest.Session) -> None:
    """The xdist controller notes where the results file ends and which pairs the run has, so
    that a pair whose worker died before its row was written still gets one (sessionfinish)."""
    config = session.config
    results_path = _setting(config, "--cudaagent-results")
    if results_path and is_xdist_controller(config):
        pairs = _requested_pairs(config)
        if _setting(config, "--cudaagent-resume"):
            done = done_keys(results_path)[0]
            pairs = [pair for pair in pairs if pair.key not in done]
        size = Path(results_path).stat().st_size if Path(results_path).exists() else 0
        config.stash[RUN_START] = (size, pairs)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    # The batch is over: references kept for its next candidates (or problems) end now, not at
    # exit, and so does a worker started for a pair that did not run.
    from .workers.reference_batch import close_kept
    from .workers.start_ahead import forget

    forget()
    close_kept()
    reused_reference.allow(False)
    started = session.config.stash.get(RUN_START, None)
    if started is not None and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        size, pairs = started
        if pairs:
            record_missing(_setting(session.config, "--cudaagent-results"),
                           [(pair.problem, pair.candidate) for pair in pairs], size,
                           "the pytest worker evaluating it ended (see pytest's report of the crashed worker)",
                           config_from_pytest(session.config).device)


def evaluate(problem, candidate, config: EvalConfig) -> Result:
    """The evaluation core's `evaluate`, imported on the first item (not in xdist's controller)."""
    from .evaluation import evaluate as evaluate_pair

    return evaluate_pair(problem, candidate, config)


def evaluate_to_result(problem, candidate, config: EvalConfig) -> Result:
    """`evaluate` with every ending as a Result: one row per pair (evaluation.evaluate_to_result)."""
    from .evaluation import evaluate_to_result as evaluate_pair

    start_trace.mark("evaluation.imported")

    return evaluate_pair(problem, candidate, config)


def xdist_worker_id(config: pytest.Config) -> str | None:
    """This process's xdist worker id ("gw0"), from xdist's own `workerinput`: PYTEST_XDIST_WORKER
    would also be set in a run started from inside an xdist worker (its environment inherited),
    whose controller would then pin itself, and its workers, to a GPU by the outer run's id."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput.get("workerid") if isinstance(workerinput, dict) else None


def is_xdist_controller(config: pytest.Config) -> bool:
    """The process that hands items to xdist workers (it evaluates nothing itself). A worker has
    `workerinput` from its start; PYTEST_XDIST_WORKER alone would also be set in a run started from
    inside an xdist worker (its environment inherited), whose controller this then is."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", None))


def _requested_pairs(config: pytest.Config) -> list[Pair]:
    problem, candidate = _setting(config, "--cudaagent-problem"), _setting(config, "--cudaagent-candidate")
    problems, candidates = _setting(config, "--cudaagent-problems"), _setting(config, "--cudaagent-candidates")
    if bool(problem) != bool(candidate):
        raise pytest.UsageError("--cudaagent-problem and --cudaagent-candidate go together")
    if bool(problems) != bool(candidates):
        raise pytest.UsageError("--cudaagent-problems and --cudaagent-candidates go together")
    pairs = [Pair(Path(problem), Path(candidate))] if problem else []
    if problems:
        try:
            pairs += pair_directory(Path(problems), Path(candidates))
        except FileNotFoundError as error:
            raise pytest.UsageError(config.stash[PATHS][1].shown(str(error))) from None
    return pairs


def drop_default_tests(config: pytest.Config, items: list) -> None:
    """When the command line named no test paths (pytest fell back to testpaths or the current folder),
    a run asked to evaluate candidates or filter tasks is about those only: the project's own
    tests are deselected instead of running alongside."""
    if getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS and items:
        config.hook.pytest_deselected(items=list(items))
        items.clear()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    pairs = _requested_pairs(config)
    if pairs:
        drop_default_tests(config, items)
        if _setting(config, "--cudaagent-require-sandbox"):
            try:
                require_sandbox()
            except SandboxUnavailable as error:
                pytest.exit(f"cudaagent: {error}", returncode=2)
    results_path = _setting(config, "--cudaagent-results")
    skip, skipped = done_keys(results_path) if results_path and _setting(config, "--cudaagent-resume") else (set(), "")
    if skipped:
        warnings.warn(pytest.PytestWarning(skipped), stacklevel=2)
    for pair in pairs:
        if pair.key not in skip:
            items.append(CandidateItem.from_parent(session, name=f"cudaagent::{pair.name}", pair=pair))


class CandidateFailed(Exception):
    def __init__(self, result: Result):
        super().__init__(result.summary())
        self.result = result


class CandidateItem(pytest.Item):
    def __init__(self, *, pair: Pair, **kwargs):
        super().__init__(**kwargs)
        self.pair = pair
        self.add_marker("cudaagent")

    def runtest(self) -> None:
        start_trace.mark("item.start", pair=self.name)
        # Every pair leaves one row, whoever is at fault: the candidate, its problem, or us.
        result = evaluate_to_result(self.pair.problem, self.pair.candidate, config_from_pytest(self.config))
        start_trace.mark("item.end", pair=self.name)
        results_path = _setting(self.config, "--cudaagent-results")
        if results_path:
            append_result(results_path, result)
        self.user_properties.append((RESULT_PROPERTY, result.to_json()))
        if not result.passed:
            raise CandidateFailed(result)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CandidateFailed):
            result = excinfo.value.result
            lines = [result.summary()]
            lines += [f"  trial {t.index}: {t.error}" for t in result.trials if not t.correct]
            lines += [f"  warning [{w.rule}] {w.detail}" for w in result.warnings]
            if result.status in ("build_error", "runtime_error", "crashed") and result.log:
                lines += ["  --- candidate log (tail) ---", result.log[-1500:]]
            if result.status == "harness_error" and result.log:
                lines += ["  --- the evaluator's traceback ---", result.log[-3000:]]
            return "\n".join(lines)
        if isinstance(excinfo.value, BadFileError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.pair.candidate, None, f"cudaagent: {self.pair.name} <- {self.pair.candidate.name}"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    rows = []
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", []):
        for key, value in getattr(report, "user_properties", []):
            if key == RESULT_PROPERTY and report.when == "call":
                rows.append(Result.from_json(value))
    if not rows:
        return
    terminalreporter.section("cudaagent results")
    for result in rows:
        terminalreporter.write_line(f"{Path(result.problem).stem:<28} {Path(result.candidate).name:<32} {result.summary()}")


class CudaAgentFixture:
    """`cudaagent.verify(problem, candidate, **overrides) -> Result` for hand-written tests."""

    def __init__(self, config: EvalConfig):
        self.config = config

    def verify(self, problem, candidate, **overrides) -> Result:
        config = EvalConfig.from_dict({**self.config.to_dict(), **_plain(overrides)})
        return evaluate(problem, candidate, config)


def _plain(overrides: dict) -> dict:
    return json.loads(json.dumps(overrides, default=str))


@pytest.fixture
def cudaagent(request) -> CudaAgentFixture:
    return CudaAgentFixture(copy.deepcopy(config_from_pytest(request.config)))  # a test's changes stay its own
