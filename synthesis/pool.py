"""Runs the filters over many tasks on a few long-lived worker processes, in parallel.

Each worker is a `pytest_cudaagent.channel.Worker` (spawned child, private pipe, timeout, host
memory cap). A task that hangs, crashes its worker or exhausts memory costs that task only: the
worker is replaced and the next task goes on. Timing inside the workers takes the device lock,
so parallel workers share one GPU without timing each other's kernels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pytest_cudaagent.channel import Worker, WorkerDied, WorkerFailure, WorkerTimeout

from .filter_worker import filter_main
from .filters import FilterConfig, FilterOutcome
from .task import Task


@dataclass
class PoolConfig:
    workers: int = 1
    task_timeout_s: float = 300.0  # a cold torch.compile takes seconds; a hang takes forever
    memory_cap_gb: float = 32.0
    gpus: int = 1  # workers are spread over this many GPUs (CUDA_VISIBLE_DEVICES)


class FilterPool:
    def __init__(self, filter_config: FilterConfig, pool_config: PoolConfig):
        self.filter_config = filter_config
        self.pool_config = pool_config

    def _spawn(self, slot: int) -> Worker:
        env = {}
        if self.filter_config.device == "cuda" and self.pool_config.gpus > 1:
            env["CUDA_VISIBLE_DEVICES"] = str(slot % self.pool_config.gpus)
        if self.filter_config.device == "cpu":
            # Workers share the cores: one thread each keeps them from oversubscribing.
            env["OMP_NUM_THREADS"] = "1"
        return Worker(filter_main, {"config": self.filter_config.to_dict()},
                      self.pool_config.memory_cap_gb, env)

    def _check(self, worker: Worker, task: Task) -> tuple[FilterOutcome, bool]:
        """The outcome, and whether the worker is still usable."""
        try:
            reply = worker.request(("check", task.source), self.pool_config.task_timeout_s)
            reply.pop("kind", None)
            return FilterOutcome.from_dict(reply), True
        except WorkerTimeout as error:
            return FilterOutcome(source=task.source).fail("timeout", str(error)), False
        except WorkerDied as error:
            detail = f"{error}; log: {worker.log_tail(600)}"
            return FilterOutcome(source=task.source).fail("crashed", detail), False
        except WorkerFailure as error:
            # Task code that raised SystemExit answered, then ended the worker's serve loop.
            return FilterOutcome(source=task.source).fail("crashed", str(error)), False

    def run(self, tasks: Iterator[Task], on_result: Callable[[Task, FilterOutcome], None]) -> None:
        """Check every task from `tasks` (pulled lazily, so composition overlaps filtering);
        `on_result` is called once per task, never from two threads at once."""
        take_lock, report_lock = threading.Lock(), threading.Lock()
        errors: list[BaseException] = []

        def next_task() -> Task | None:
            with take_lock:
                return next(tasks, None)

        def serve(slot: int) -> None:
            worker = None
            try:
                while not errors and (task := next_task()) is not None:
                    worker = worker or self._spawn(slot)
                    outcome, usable = self._check(worker, task)
                    if not usable:
                        worker.close()
                        worker = None
                    with report_lock:
                        on_result(task, outcome)
            except BaseException as error:  # surfaced in the caller's thread below
                errors.append(error)
            finally:
                if worker is not None:
                    worker.close()

        threads = [threading.Thread(target=serve, args=(slot,), daemon=True)
                   for slot in range(max(1, self.pool_config.workers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
