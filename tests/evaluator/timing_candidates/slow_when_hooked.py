"""A probe, not a cheat: the reference's leaky ReLU, sleeping 50 ms in any call that runs under a
Python-level hook (sys.setprofile, sys.settrace) or a torch dispatch or function mode. Watched
calls carry them (the operator audit; on the CPU the NumPy watch); timed calls run bare, so they
must not sleep."""

import sys
import time

import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _len_torch_dispatch_stack


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        if sys.getprofile() or sys.gettrace() or _len_torch_dispatch_stack() or _get_current_function_mode_stack():
            time.sleep(0.05)
        return F.leaky_relu(x, self.negative_slope)
