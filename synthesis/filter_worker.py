"""A filter worker: one long-lived child process that checks many tasks, one request each, so
torch is imported and CUDA initialised once per worker, not once per task."""

from __future__ import annotations

import gc
import os
import sys
import tempfile
from pathlib import Path

from pytest_cudaagent.workers.worker import serve_requests, setup_worker

from .stage_log import DONE, stage_line


def filter_main(conn, spec: dict) -> None:
    setup_worker(spec)  # stdout/stderr to the log, environment (threads, CUDA_VISIBLE_DEVICES) before torch
    import torch
    import torch._inductor.config as inductor_config

    from pytest_cudaagent.timing.timer import Clock, Timer

    from .filters import FilterConfig, check_task

    # The pool's thread settings (FilterPool.worker_env), applied again here: a spawned child
    # re-imports the parent's main script, which may have imported torch before they were set.
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    inductor_config.compile_threads = int(os.environ["TORCHINDUCTOR_COMPILE_THREADS"])
    config = FilterConfig.from_dict(spec["config"])
    stage_log = spec.get("stage_log")
    # Generated tasks are judged in full fp32, as the evaluator's reference is.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    clock = Clock(config.device)
    timer = Timer(clock, config.timing)
    idle_bytes = torch.cuda.memory_allocated() if config.device == "cuda" else 0
    workdir = tempfile.TemporaryDirectory(prefix="cudaagent-synth-")

    def check(source: str, task_id: str = "") -> dict:
        def on_stage(stage: str, detail: str = "") -> None:
            line = stage_line(os.getpid(), task_id, stage, detail)
            sys.stdout.write(line)  # the worker's log: the pool names the stage of a task it kills
            sys.stdout.flush()
            if stage_log:
                with open(stage_log, "a") as handle:
                    handle.write(line)

        outcome = check_task(source, config, clock, timer, Path(workdir.name), on_stage)
        on_stage(DONE, "kept" if outcome.kept else ",".join(outcome.reasons))
        # Generated modules would otherwise pile up in this long-lived process, and the task's
        # GPU memory would stay cached here while other workers on the device need it.
        for name in [n for n in sys.modules if n.startswith("cudaagent_synth_task_")]:
            del sys.modules[name]
        if config.device == "cuda":
            try:
                torch.cuda.synchronize()
            except RuntimeError:
                # A sticky CUDA error (illegal address, device-side assert): this process's
                # context is gone. Exiting makes the pool drop the task as crashed, with the
                # stage from this log, and start a fresh worker for the next one.
                os._exit(70)
            if torch.cuda.memory_allocated() > idle_bytes + (256 << 20):
                gc.collect()  # tensors held by a reference cycle (a traceback's frames); ~0.3 s
            torch.cuda.empty_cache()
        return outcome.to_dict()

    try:
        serve_requests(conn, {"check": check})
    finally:
        workdir.cleanup()
