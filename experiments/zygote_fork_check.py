"""Which of the zygote's imports poisons fork for CUDA (zygote.py): imports them one by one, each
followed by a forked child that asks torch whether it may still initialise CUDA.

    python -m experiments.zygote_fork_check [--nvml-check]

A module that calls `torch.cuda.is_available()` (or the device count through the CUDA runtime)
when imported makes every forked child fail with "Cannot re-initialize CUDA in forked
subprocess"; `--nvml-check` sets PYTORCH_NVML_BASED_CUDA_CHECK=1, under which is_available asks
NVML instead, first."""

from __future__ import annotations

import argparse
import os
import sys
import time

from pytest_cudaagent.workers.zygote import PRELOAD


def child_in_bad_fork() -> bool:
    pid = os.fork()
    if pid == 0:
        import torch

        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvml-check", action="store_true", help="set PYTORCH_NVML_BASED_CUDA_CHECK=1 first")
    args = parser.parse_args(argv)
    if args.nvml_check:
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    print(f"{'module':36} {'import s':>9} {'child in bad fork':>18}")
    for name in PRELOAD:
        started = time.perf_counter()
        try:
            __import__(name)
        except ImportError as error:
            print(f"{name:36} not importable: {error}")
            continue
        seconds = time.perf_counter() - started
        print(f"{name:36} {seconds:9.2f} {str(child_in_bad_fork()):>18}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
