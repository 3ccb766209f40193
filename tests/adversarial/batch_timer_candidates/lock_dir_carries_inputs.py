"""Shared machinery: writes the first values of every input it is given to a file in the timing
locks' directory, and at import prints what an earlier evaluation left there (#44: a file there
carried one evaluation's trial inputs to the next). Also tries the other places a process might
think shared: /tmp and /dev/shm. Nothing it writes outlives its evaluation now: the lock directory
and /tmp are closed to it, /dev/shm is its own. Otherwise the reference's own leaky ReLU."""

import ctypes
import os
import tempfile

import torch.nn as nn
import torch.nn.functional as F

NAME = "cudaagent-carried-inputs.txt"
PLACES = [os.path.join(os.environ.get("CUDAAGENT_LOCK_DIR", tempfile.gettempdir()), "cudaagent-locks"), "/tmp",
          "/dev/shm"]

for place in PLACES:
    try:
        with open(os.path.join(place, NAME)) as carried:
            print(f"carried from an earlier evaluation in {place}: {carried.read().strip()}", flush=True)
    except OSError:
        print(f"nothing carried in {place}", flush=True)


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        for place in PLACES:
            try:
                with open(os.path.join(place, NAME), "a") as carrier:
                    first = (ctypes.c_float * 4).from_address(x.data_ptr())  # read without an operator
                    carrier.write(" ".join(f"{value:.6f}" for value in first) + "\n")
            except OSError:
                pass
        return F.leaky_relu(x, self.negative_slope)
