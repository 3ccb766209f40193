"""Scoring finished episodes: inline for cheap toy rewards; a process pool with one worker per
device (one per GPU for the evaluator's timing) that scores each episode the moment it ends, while
generation goes on; or the whole batch through one pytest-xdist run (xdist_scorer.py)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from pytest_cudaagent.system.cores import usable_cores

from .environments import Environment, Task

SCORERS = ("inline", "pool", "xdist")

# The device this pool worker scores on; set once by the pool initializer, read by every job.
_WORKER_DEVICE = "cpu"


def _pin_worker_to_device(device_queue) -> None:
    # Runs first in the spawned worker, before anything initialises CUDA: the worker sees only its
    # GPU, as "cuda", which is what the evaluator's timing lock and kernels expect.
    global _WORKER_DEVICE
    device = device_queue.get()
    if device.startswith("cuda:"):
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
        device = "cuda"
    _WORKER_DEVICE = device


def _score_in_worker(environment: Environment, task: Task, assistant_turns: list[str]) -> float:
    return environment.score(task, assistant_turns, _WORKER_DEVICE)


class InlineScorer:
    """Scores at once in this process; for rewards that cost microseconds."""

    def __init__(self, environment: Environment, device: str = "cpu"):
        self.environment = environment
        self.device = device

    def submit(self, task: Task, assistant_turns: list[str]) -> Future:
        future: Future = Future()
        try:
            future.set_result(self.environment.score(task, assistant_turns, self.device))
        except Exception as error:  # the future carries it to whoever waits
            future.set_exception(error)
        return future

    def flush(self) -> None:
        """Nothing waits: every episode was scored on submission."""

    def close(self) -> None:
        pass


class DevicePoolScorer:
    """One spawned worker per device; an episode is submitted the moment it ends, so scoring of
    early episodes overlaps generation of the rest and the trainer's forward passes."""

    def __init__(self, environment: Environment, devices: list[str]):
        if not devices:
            raise ValueError("DevicePoolScorer needs at least one device, e.g. ['cuda:0'] or ['cpu']")
        self.environment = environment
        context = multiprocessing.get_context("spawn")
        device_queue = context.Queue()
        for device in devices:
            device_queue.put(device)
        self._pool = ProcessPoolExecutor(
            max_workers=len(devices),
            mp_context=context,
            initializer=_pin_worker_to_device,
            initargs=(device_queue,),
        )

    def submit(self, task: Task, assistant_turns: list[str]) -> Future:
        return self._pool.submit(_score_in_worker, self.environment, task, list(assistant_turns))

    def flush(self) -> None:
        """Nothing waits: every episode went to the pool on submission."""

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def evaluator_config(device: str, options: dict, convention: str = "kernelbench"):
    """The evaluator's settings for a CUDA environment: EvalConfig's defaults (both baselines, so
    rewards 2 and 3 are reachable), the config's `eval_options` over them, then the environment's
    convention and device. The convention is the environment's own field, so the agent's tools
    and the reward judge by one setting; `eval_options` may not name another."""
    from pytest_cudaagent import EvalConfig

    if options.get("convention", convention) != convention:
        raise ValueError(f"eval_options sets convention {options['convention']!r} but the environment's "
                         f"convention is {convention!r}; set it once, as the environment's `convention`")
    return EvalConfig.from_dict({**EvalConfig().to_dict(), **options, "convention": convention, "device": device})


def scoring_devices(requested: list[str] | None) -> list[str]:
    """The devices to score on: as configured, else every visible GPU, else one CPU worker per
    two cores (the evaluator's own workers need the rest)."""
    if requested:
        return list(requested)
    import torch

    if torch.cuda.is_available():
        return [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    return ["cpu"] * max(1, usable_cores() // 2)


def build_scorer(environment: Environment, mode: str, devices: list[str] | None = None,
                 work_dir: str | Path | None = None, process: int | None = None):
    """mode 'inline' (toy rewards), 'pool' (the evaluator: one worker per device, each episode
    scored the moment it ends) or 'xdist' (the batch through one pytest-xdist run, files under
    `work_dir`; `process`, the trainer's process index, is written beside them)."""
    if mode == "inline":
        return InlineScorer(environment)
    if mode == "pool":
        return DevicePoolScorer(environment, scoring_devices(devices))
    if mode == "xdist":
        from .xdist_scorer import XdistScorer

        if work_dir is None:
            raise ValueError("scorer xdist writes candidate files: give it a work_dir")
        return XdistScorer(environment, scoring_devices(devices), work_dir, process=process)
    raise ValueError(f"unknown scorer {mode!r}; use one of {', '.join(SCORERS)}")
