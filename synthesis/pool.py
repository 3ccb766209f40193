"""Runs the filters over many tasks on a few long-lived worker processes, in parallel.

Each worker is a `pytest_cudaagent.workers.channel.Worker` (spawned child, private pipe, timeout, host
memory cap). A task that hangs, crashes its worker or exhausts memory costs that task only: the
worker is replaced and the next task goes on, with the stage it was in named in the outcome.
Timing inside the workers takes the device lock, so parallel workers share one GPU without
timing each other's kernels.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cudaagent.core.config import default_memory_cap_gb
from pytest_cudaagent.system.cores import usable_cores
from pytest_cudaagent.workers.channel import Worker, WorkerDied, WorkerFailure, WorkerTimeout

from .filter_worker import filter_main
from .filters import FilterConfig, FilterOutcome
from .stage_log import DONE, last_stage, stage_line
from .task import Task


@dataclass
class PoolConfig:
    workers: int = 1
    # A task takes seconds (a worker's first torch.compile imports inductor and Triton: ~20 s);
    # a hang holds its worker until this, so it is not much longer than the slowest honest task.
    task_timeout_s: float = 120.0
    memory_cap_gb: float = field(default_factory=default_memory_cap_gb)  # derived from the machine (config.py)
    gpus: int = 1  # workers are spread over this many GPUs (CUDA_VISIBLE_DEVICES)
    stage_log: Path | None = None  # where workers log each stage start (stage_log.py)


class FilterPool:
    def __init__(self, filter_config: FilterConfig, pool_config: PoolConfig):
        self.filter_config = filter_config
        self.pool_config = pool_config

    def worker_env(self, slot: int) -> dict[str, str]:
        """Set in the worker before torch is imported."""
        workers = max(1, self.pool_config.workers)
        env = {
            # The workers share the cores: torch's CPU threads split between them, and inductor
            # compiles in the worker's own process rather than starting a pool of compile
            # processes per worker (14 workers x 16 processes, each importing torch). The
            # parallelism is the workers'. An explicit setting in the environment wins.
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, usable_cores() // workers))),
            "TORCHINDUCTOR_COMPILE_THREADS": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "1"),
        }
        if self.filter_config.device == "cuda" and self.pool_config.gpus > 1:
            env["CUDA_VISIBLE_DEVICES"] = str(slot % self.pool_config.gpus)
        return env

    def _spawn(self, slot: int) -> Worker:
        stage_log = str(self.pool_config.stage_log) if self.pool_config.stage_log else None
        return Worker(filter_main, {"config": self.filter_config.to_dict(), "stage_log": stage_log},
                      self.pool_config.memory_cap_gb, self.worker_env(slot))

    def _check(self, worker: Worker, task: Task) -> tuple[FilterOutcome, bool]:
        """The outcome, and whether the worker is still usable."""
        started = time.perf_counter()
        try:
            reply = worker.request(("check", task.source, task.task_id), self.pool_config.task_timeout_s)
            reply.pop("kind", None)
            return FilterOutcome.from_dict(reply), True
        except WorkerTimeout as error:
            return self._lost(worker, task, "timeout", str(error), started), False
        except WorkerDied as error:
            return self._lost(worker, task, "crashed", f"{error}; log: {worker.log_tail(600)}", started), False
        except WorkerFailure as error:
            # Task code that raised SystemExit answered, then ended the worker's serve loop.
            return self._lost(worker, task, "crashed", str(error), started), False

    def _lost(self, worker: Worker, task: Task, reason: str, detail: str, started: float) -> FilterOutcome:
        """The outcome of a task that ended its worker: the stage it was in (from the worker's
        log) fails and carries the seconds spent."""
        # No line yet: the worker died or hung before the task began (its start-up).
        stage, note = last_stage(worker.log_tail(4000), task.task_id) or ("startup", "")
        outcome = FilterOutcome(source=task.source)
        if stage != DONE:
            detail = f"in the {stage} stage{' (' + note + ')' if note else ''}: {detail}"
            outcome.checks[stage] = "fail"
            outcome.filter_seconds[stage] = time.perf_counter() - started
        return outcome.fail(reason, detail)

    def _log_end(self, worker: Worker, task: Task, outcome: FilterOutcome) -> None:
        """The stage log's last line for a task whose worker could not write it."""
        if self.pool_config.stage_log:
            with open(self.pool_config.stage_log, "a") as handle:
                handle.write(stage_line(worker.process.pid, task.task_id, DONE, ",".join(outcome.reasons)))

    def run(self, tasks: Iterator[Task], on_result: Callable[[Task, FilterOutcome], None]) -> None:
        """Check every task from `tasks` (pulled lazily, so composition overlaps filtering);
        `on_result` is called once per task, never from two threads at once.

        Interrupted (SIGTERM through lifetime.stop_on_sigterm, or Ctrl-C), it kills the workers,
        lets its threads return without recording the tasks they had in flight, and re-raises:
        a thread still inside torch when the interpreter exits aborts the process."""
        take_lock, report_lock = threading.Lock(), threading.Lock()
        errors: list[BaseException] = []
        stopping = threading.Event()
        live: dict[int, Worker] = {}  # slot -> its worker, for the stopping thread to kill
        # Waited on instead of Thread.join: a join interrupted by a signal can report a running
        # thread as stopped (CPython 3.11).
        finished = [threading.Event() for _ in range(max(1, self.pool_config.workers))]

        def next_task() -> Task | None:
            with take_lock:
                return None if stopping.is_set() else next(tasks, None)

        def serve(slot: int) -> None:
            worker = None
            try:
                while not errors and (task := next_task()) is not None and not stopping.is_set():
                    worker = live[slot] = worker or self._spawn(slot)
                    if stopping.is_set():  # set after this worker was registered: it is ours to end
                        return
                    outcome, usable = self._check(worker, task)
                    if stopping.is_set():  # the worker was killed under the task: no verdict
                        return
                    if not usable:
                        self._log_end(worker, task, outcome)
                        worker.close()
                        worker = None
                    with report_lock:
                        on_result(task, outcome)
            except BaseException as error:  # surfaced in the caller's thread below
                errors.append(error)
            finally:
                if worker is not None:
                    worker.close()
                finished[slot].set()

        for slot in range(len(finished)):
            threading.Thread(target=serve, args=(slot,), daemon=True).start()
        try:
            for done in finished:
                done.wait()
        except BaseException:
            stopping.set()
            for worker in list(live.values()):
                worker.kill()
            for done in finished:
                done.wait(timeout=30)
            raise
        if errors:
            raise errors[0]
