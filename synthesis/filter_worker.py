"""A filter worker: one long-lived child process that checks many tasks, one request each, so
torch is imported and CUDA initialised once per worker, not once per task."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from pytest_cudaagent.worker import serve_requests, setup_worker


def filter_main(conn, spec: dict) -> None:
    setup_worker(spec)  # stdout/stderr to the log, environment (CUDA_VISIBLE_DEVICES) before torch
    import torch

    from pytest_cudaagent.timer import Clock, Timer

    from .filters import FilterConfig, check_task

    config = FilterConfig.from_dict(spec["config"])
    # Generated tasks are judged in full fp32, as the evaluator's reference is.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    clock = Clock(config.device)
    timer = Timer(clock, config.timing)
    workdir = tempfile.TemporaryDirectory(prefix="cudaagent-synth-")

    def check(source: str) -> dict:
        outcome = check_task(source, config, clock, timer, Path(workdir.name))
        # Generated modules would otherwise pile up in this long-lived process.
        for name in [n for n in sys.modules if n.startswith("cudaagent_synth_task_")]:
            del sys.modules[name]
        return outcome.to_dict()

    try:
        serve_requests(conn, {"check": check})
    finally:
        workdir.cleanup()
