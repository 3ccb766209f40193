"""Evaluations for many concurrent episodes, spread over the GPUs: one process pool per GPU,
pinned with CUDA_VISIBLE_DEVICES, so each GPU times one candidate at a time (on CPU, one worker).

Thread-safe: episodes running in threads call `evaluate` at the same time and block until their
Result is back.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pytest_cudaagent import BadFileError, EvalConfig, Result, evaluate
from pytest_cudaagent.system.lifetime import exit_when_parent_dies


def _start_pool_process(gpu: str | None, parent_pid: int) -> None:
    # Runs first in each fresh (spawned) worker, before anything initialises CUDA.
    exit_when_parent_dies(parent_pid)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu


def _evaluate_to_json(problem: str, candidate: str, config: dict) -> str:
    try:
        return evaluate(problem, candidate, EvalConfig.from_dict(config)).to_json()
    except BadFileError as error:
        # A workspace the agent left unbuildable (no model_new.py, no kernels) is a failed
        # candidate, not a crash of the pool. A broken problem (ProblemError) still propagates.
        if type(error) is not BadFileError:
            raise
        return unevaluable_result(problem, candidate, str(error), config.get("device", "cpu")).to_json()


def unevaluable_result(problem: str, candidate: str, error: str, device: str) -> Result:
    return Result(str(problem), str(candidate), status="build_error", error=error, device=device)


def visible_gpus() -> list[str]:
    """The GPU ids this process may use, as CUDA_VISIBLE_DEVICES names them."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [gpu.strip() for gpu in listed.split(",") if gpu.strip()]
    import torch

    return [str(index) for index in range(torch.cuda.device_count())]


class EvaluationPool:
    def __init__(self, device: str, gpus: list[str] | None = None, evaluations_per_gpu: int = 1):
        if device == "cuda":
            gpus = gpus if gpus is not None else visible_gpus()
            if not gpus:
                raise RuntimeError("--device cuda, but no GPU is visible; use --device cpu")
            slots: list[str | None] = list(gpus)
        else:
            slots = [None]
        context = multiprocessing.get_context("spawn")
        self._executors = [
            ProcessPoolExecutor(evaluations_per_gpu, mp_context=context, initializer=_start_pool_process,
                                initargs=(gpu, os.getpid()))
            for gpu in slots
        ]
        self.slots = slots
        self._in_flight = [0] * len(slots)
        self._lock = threading.Lock()

    def evaluate(self, problem: str | Path, candidate: str | Path, config: EvalConfig) -> Result:
        with self._lock:
            slot = min(range(len(self.slots)), key=self._in_flight.__getitem__)
            self._in_flight[slot] += 1
        try:
            future = self._executors[slot].submit(_evaluate_to_json, str(problem), str(candidate), config.to_dict())
            return Result.from_json(future.result())
        finally:
            with self._lock:
                self._in_flight[slot] -= 1

    def close(self) -> None:
        for executor in self._executors:
            executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> EvaluationPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
