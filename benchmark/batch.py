"""The batch runner: evaluates many (problem, candidate) pairs through the evaluator's pytest
plugin under pytest-xdist, in a subprocess, appending each Result to a JSONL file as it finishes.

Workers: one timing worker per GPU would leave the CPU idle while a candidate is timed, so the
default is more workers than GPUs; builds of later candidates then run on the spare cores while
the per-GPU lock (pytest_cudaagent.timing.locks) keeps the timings one at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from pytest_cudaagent.core.config import EvalConfig
from pytest_cudaagent.core.result import Result
from pytest_cudaagent.records.pairing import Pair
from pytest_cudaagent.records.results_file import done_keys, pair_key, record_missing
from pytest_cudaagent.system import bytecode_cache, start_trace
from pytest_cudaagent.system.cores import usable_cores
from pytest_cudaagent.system.gpu_pinning import visible_gpus
from pytest_cudaagent.system.lifetime import PARENT_PID_ENV
from pytest_cudaagent.terminal import console as console_for_output
from pytest_cudaagent.timing.waits import RUN_ID_ENV, STATUS_DIR_ENV, run_id

from .pairs_plugin import write_manifest
from .progress import ResultsTail, follow

REPO_ROOT = Path(__file__).resolve().parent.parent
# A cold build keeps about one core busy on a busy GPU machine (the lean .cu's nvcc chain, the
# binding beside it, split_nvcc off under load): 20 candidates on the 16-core H100 machine took
# 98 s with 12 workers and 96 s with 16, the same code on one machine (8 workers, measured only
# with earlier code: 175 s; README, "Harness throughput").
CORES_PER_BUILD = 1
# Workers per GPU at most: each holds a CUDA context for itself and each of its two worker
# processes, and 16 per H100 is as far as it was measured.
WORKERS_PER_GPU_AT_MOST = 16
# pytest's exit codes for "every item ran" (1: some candidates failed, which is a normal outcome).
PYTEST_RAN = (0, 1)
# The run's EvalConfig as JSON, in the run's folder (OUT/.bench-run): what every evaluation got.
RUN_CONFIG = "eval_config.json"


class BatchError(RuntimeError):
    """The batch could not start or pytest stopped abnormally; the message says what to do."""


class BatchInterrupted(Exception):
    """Ctrl-C or SIGTERM ended the run: its pytest and workers are gone; what finished is in
    `results_path` (`done` of the `todo` pairs this invocation ran), the rest is left for --resume."""

    def __init__(self, results_path: Path, done: int, todo: int, signal_exit: int):
        super().__init__(f"interrupted after {done} of {todo} pair(s)")
        self.results_path, self.done, self.todo, self.signal_exit = results_path, done, todo, signal_exit


@dataclass
class BatchSettings:
    # The evaluator's settings, whole: every evaluation of the run gets this EvalConfig (on the
    # run's device, with the run's reference batch id), handed to pytest as one --cudaagent-config.
    config: EvalConfig = field(default_factory=EvalConfig)
    workers: int | None = None  # xdist workers; None: default_workers()
    # The GPUs the workers are pinned over, round robin (CUDA_VISIBLE_DEVICES of the run); None: all.
    gpus: tuple[str, ...] | None = None
    # Candidates of the run share each problem's reference within a worker (EvalConfig.reference_batch,
    # a fresh id per run): every candidate file exists before the run starts, so none can know it.
    share_reference: bool = True
    # A worker's next candidate starts (sandbox, build) once its current one has built, while that
    # one is checked and timed (pytest_cudaagent.workers.start_ahead).
    start_ahead: bool = True


@dataclass
class BatchOutcome:
    results_path: Path
    log_path: Path | None
    planned: int  # pairs asked for
    skipped: int  # already in the results file (--resume)
    workers: int = 0
    new_results: list[Result] = field(default_factory=list)
    pytest_exit: int | None = None  # None when nothing was left to run
    # Pairs pytest ran whose evaluation wrote no row (its xdist worker died): given a harness_error
    # row each, in new_results too, so every pair has one.
    unreported: list[Result] = field(default_factory=list)

    @property
    def missing(self) -> int:
        """Pairs without a Result: pytest stopped before running them (see the log)."""
        return self.planned - self.skipped - len(self.new_results)


def gpu_count() -> int:
    """GPUs torch can use (imports torch: 5.5 s on the H100 machine, so a batch asks while its
    pytest run starts, not before)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def visible_gpu_count() -> int:
    """GPUs the driver shows this process (NVML, CUDA_VISIBLE_DEVICES), without importing torch."""
    return len(visible_gpus())


def torch_built_with_cuda() -> bool:
    """Whether the installed torch is a CUDA build, read from its version file without importing
    it; imported if that file does not say."""
    spec = importlib.util.find_spec("torch")
    version_file = Path(spec.origin).parent / "version.py" if spec and spec.origin else None
    if version_file is not None and version_file.is_file():
        found = re.search(r"^cuda\b[^=\n]*=\s*(.+)$", version_file.read_text(), flags=re.MULTILINE)
        if found:
            return found.group(1).strip() != "None"
    import torch

    return torch.version.cuda is not None


def batch_device(device: str, gpus: int | None = None) -> str:
    """The device a batch runs on: as given, or for "auto" cuda when the driver shows a GPU (`gpus`
    of them, counted here if not given) and torch is a CUDA build (what torch.cuda.is_available()
    would say, bar a broken driver, which the check beside the run's start then reports)."""
    if device != "auto":
        return device
    gpus = visible_gpu_count() if gpus is None else gpus
    return "cuda" if gpus and torch_built_with_cuda() else "cpu"


def default_workers(device: str, gpus: int, cpus: int) -> int:
    """Two workers per GPU at least; more while spare cores can each take another build, up to
    WORKERS_PER_GPU_AT_MOST per GPU."""
    if device == "cuda":
        gpus = max(gpus, 1)
        return max(2 * gpus, min(cpus // CORES_PER_BUILD, WORKERS_PER_GPU_AT_MOST * gpus))
    # On the CPU backend builds and timings share the cores: keep one build beside the timing.
    return max(1, min(2, cpus // 2))


def run_config(settings: BatchSettings, device: str) -> EvalConfig:
    """The EvalConfig every evaluation of the run gets: the settings' own, on the run's `device`,
    under a reference batch id of the run's own when its candidates share references."""
    return dataclasses.replace(settings.config, device=device,
                               reference_batch=uuid.uuid4().hex if settings.share_reference
                               else settings.config.reference_batch)


def pytest_command(manifest: Path, results_path: Path, run_dir: Path, settings: BatchSettings,
                   device: str, workers: int) -> list[str]:
    """The run's pytest command; writes the run's EvalConfig (run_config) to run_dir/RUN_CONFIG,
    which the plugin reads once per process (--cudaagent-config)."""
    loaded = {entry.value for entry in importlib.metadata.entry_points(group="pytest11")}
    autoload = not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    config_path = run_dir / RUN_CONFIG
    config_path.write_text(json.dumps(run_config(settings, device).to_dict(), indent=1) + "\n")
    command = [sys.executable, "-m", "pytest", str(run_dir), "-c", str(run_dir / "pytest.ini"),
               "--rootdir", str(run_dir), "-p", "no:cacheprovider", "-p", "no:benchmark", "-q", "-rN"]
    for plugin in ("pytest_cudaagent.plugin", "xdist.plugin"):
        if not (autoload and plugin in loaded):
            command += ["-p", plugin]
    command += ["-p", "benchmark.pairs_plugin", "--bench-pairs", str(manifest),
                "--cudaagent-results", str(results_path), "--cudaagent-config", str(config_path),
                "-n", str(workers), "--dist", "worksteal"]
    if settings.start_ahead:
        command.append("--cudaagent-start-ahead")
    return command


def sharing_for(todo: list[Pair], settings: BatchSettings) -> BatchSettings:
    """References are shared only where a problem has another candidate to serve: where every
    problem of the run has one, a kept reference would serve no one and hold its process, its CUDA
    context and its model (#38: 250 identity pairs at 16 workers on an 80 GiB H100 kept some 25
    idle processes of 0.6-0.9 GiB of device memory each, and a pair retried "alone" still ran out)."""
    if settings.share_reference and len({pair.problem.resolve() for pair in todo}) == len(todo):
        return dataclasses.replace(settings, share_reference=False)
    return settings


def run_batch(pairs: list[Pair], results_path: str | Path, settings: BatchSettings, *,
              resume: bool = False, console: Console | None = None) -> BatchOutcome:
    results_path = Path(results_path).resolve()
    console = console or console_for_output()
    if results_path.exists() and results_path.stat().st_size and not resume:
        raise BatchError(f"{results_path} already holds results: pass --resume to continue that run, "
                         "--overwrite to start again, or another --out")
    done, skipped = done_keys(results_path) if resume else (set(), "")
    if skipped:
        console.print(f"[yellow]{escape(skipped)}[/]", highlight=False)
    todo = [pair for pair in pairs if pair.key not in done]
    outcome = BatchOutcome(results_path, None, planned=len(pairs), skipped=len(pairs) - len(todo))
    if not todo:
        return outcome

    settings = sharing_for(todo, settings)
    gpus = visible_gpu_count()  # NVML, once
    device = batch_device(settings.config.device, gpus)
    if device == "cuda" and not gpus:
        raise BatchError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu")
    workers = settings.workers or default_workers(device, gpus, usable_cores())
    outcome.workers = workers = max(1, min(workers, len(todo)))

    run_dir = results_path.parent / ".bench-run"
    run_dir.mkdir(parents=True, exist_ok=True)
    # Our own ini file: no setting of an enclosing project reaches the run, and nothing is
    # collected from disk; the only items are the manifest's.
    (run_dir / "pytest.ini").write_text("[pytest]\n")
    manifest = run_dir / "pairs.json"
    # By problem: xdist hands each worker a run of neighbouring items, which then share their
    # problem's reference (share_reference).
    write_manifest(manifest, sorted(todo, key=lambda pair: str(pair.problem)))
    outcome.log_path = results_path.parent / "pytest.log"
    run_start = results_path.stat().st_size if results_path.exists() else 0
    tail = ResultsTail(results_path, run_start)

    # What the run's evaluations wait for, shown on the progress line (waits.py).
    status_dir = run_dir / "status"
    shutil.rmtree(status_dir, ignore_errors=True)
    env = run_environment(settings, status_dir)
    command = pytest_command(manifest, results_path, run_dir, settings, device, workers)
    with open(outcome.log_path, "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        start_trace.mark("bench.pytest_started")
        process = subprocess.Popen(command, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            # torch's own view, while pytest starts: the driver can show a GPU torch cannot use.
            if device == "cuda" and not gpu_count():
                raise BatchError("--device cuda asked for, but torch sees no CUDA GPU (the driver shows "
                                 f"{gpus}): install a CUDA build of torch, or use --device cpu")
            start_trace.mark("bench.gpu_checked")
            finished = follow(process, tail, len(todo), console, status_dir=status_dir)
        except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, or SIGTERM through lifetime.stop_on_sigterm
            _end(process)
            done = len(ResultsTail(results_path, run_start).poll())  # every row this invocation wrote
            code = 130 if isinstance(stop, KeyboardInterrupt) else (stop.code if isinstance(stop.code, int) else 143)
            raise BatchInterrupted(results_path, done, len(todo), code) from None
        except BaseException:
            _end(process)
            raise
    todo_keys = {pair.key for pair in todo}
    outcome.new_results = [r for r in finished if pair_key(r.problem, r.candidate) in todo_keys]
    outcome.pytest_exit = process.returncode
    if process.returncode in PYTEST_RAN:  # every item ran: one without a row lost its worker
        outcome.unreported = record_missing(results_path, [(pair.problem, pair.candidate) for pair in todo],
                                            run_start, "the pytest worker evaluating it ended (see pytest.log)",
                                            device)
        outcome.new_results += outcome.unreported
    return outcome


def run_environment(settings: BatchSettings, status_dir: Path) -> dict[str, str]:
    """The environment of the run's pytest, inherited by its workers and theirs."""
    # Where torch has no bytecode beside it, each process would compile it again (bytecode_cache.py).
    env = bytecode_cache.for_run(dict(os.environ, PYTHONUNBUFFERED="1"), settings.config.cache_dir)
    # The run's controller is no xdist worker, even when this process is one (a bench started from
    # a test, or from a trainer's xdist scorer): the outer worker's id would mark its trace as that
    # worker's (the plugin pins by xdist's own worker id, plugin.xdist_worker_id).
    for inherited in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        env.pop(inherited, None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if settings.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(settings.gpus)
    # pytest, its workers and their worker processes die with this process, even if it is SIGKILLed.
    env[PARENT_PID_ENV] = str(os.getpid())
    env[STATUS_DIR_ENV] = str(status_dir)
    env[RUN_ID_ENV] = run_id()
    return env


def _end(process: subprocess.Popen, grace_s: float = 20.0) -> None:
    """pytest ended, and every process under it (xdist workers, evaluations, their workers,
    compilers) gone before the run says it stopped: pytest is killed if SIGTERM has not ended
    it in `grace_s` (a Ctrl-C'd bench on the loaded CI machine was still waiting for it 120 s
    later), and those below it still there after another `grace_s` (each winds down on its own
    once its parent is gone, PARENT_PID_ENV) are killed. A second Ctrl-C while it winds down
    does not leave them running."""
    import psutil

    try:
        below = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        below = []
    while True:
        try:
            process.terminate()
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            _, alive = psutil.wait_procs(below, timeout=grace_s)
            for leftover in alive:
                with contextlib.suppress(psutil.Error):
                    leftover.kill()
            psutil.wait_procs(alive, timeout=5)
            return
        except KeyboardInterrupt:
            continue


def log_tail(path: Path | None, lines: int = 30) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
