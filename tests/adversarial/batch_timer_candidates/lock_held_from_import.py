"""Shared machinery: at import, takes the machine's timing lock (its three files, exclusively) and
holds it for as long as its process lives (#44: a candidate started ahead did, and the honest
candidate being timed got "no answer within 300 s", reward -1). The evaluating process now takes
the lock on its workers' behalf and the lock directory is closed to candidates: the attempt
fails, it says so in its log, and every timing goes on. Otherwise the reference's own leaky ReLU."""

import fcntl
import glob
import os
import tempfile

import torch.nn as nn
import torch.nn.functional as F


def _take_the_timing_lock() -> list:
    directory = os.path.join(os.environ.get("CUDAAGENT_LOCK_DIR", tempfile.gettempdir()), "cudaagent-locks")
    held = []
    try:
        # Every device's lock, or the CPU's made if none is there yet.
        names = glob.glob(os.path.join(directory, "cudaagent-timing-*")) or [
            os.path.join(directory, f"cudaagent-timing-cpu.{suffix}") for suffix in ("lock", "work", "turnstile")]
        for name in names:
            handle = open(name, "a+")
            fcntl.flock(handle, fcntl.LOCK_EX)
            held.append(handle)
        print("timing lock: held", flush=True)
    except OSError as error:
        print(f"timing lock: refused ({type(error).__name__})", flush=True)
    return held


HELD = _take_the_timing_lock()


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)
