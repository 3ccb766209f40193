"""A probe, not a cheat: computes the reference's answer, but each call whose own output takes
fresh pages (page faults while it computes) sleeps 50 ms. The harness copies timed outputs into
memory taken before the first timed call, so the allocator gives each call the previous output's
pages back; a harness that made a new shared-memory copy per call left glibc handing every call
fresh pages, faulted in inside its timed region (an identity leaky ReLU at 0.05x of eager on the
CPU)."""

import resource
import time

import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        output = F.leaky_relu(x, self.negative_slope)
        pages = output.numel() * output.element_size() // 4096
        if resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before > pages // 2:
            time.sleep(0.05)
        return output
