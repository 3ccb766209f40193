"""A probe, not a cheat: the reference's leaky ReLU, raising in any timed call (one made by the
harness's Timer.timed_call) that runs under a Python-level hook (sys.setprofile, sys.settrace),
a torch dispatch or function mode, or the autograd profiler. Watched calls carry them (the
operator audit; on the CPU the NumPy watch); timed calls must run bare, so this passes unless a
watcher comes back into them (README, "What a timed call includes")."""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _len_torch_dispatch_stack


def _in_timed_call() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "timed_call" and frame.f_globals.get("__name__", "").endswith(".timer"):
            return True
        frame = frame.f_back
    return False


def _watchers() -> list[str]:
    found = []
    if sys.getprofile() is not None:
        found.append("a sys.setprofile hook")
    if sys.gettrace() is not None:
        found.append("a sys.settrace hook")
    if _len_torch_dispatch_stack():
        found.append("a torch dispatch mode")
    if _get_current_function_mode_stack():
        found.append("a torch function mode")
    if torch.autograd.profiler._is_profiler_enabled:
        found.append("the autograd profiler")
    return found


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        watchers = _watchers()
        if watchers and _in_timed_call():
            raise RuntimeError(f"watched inside a timed call: {', '.join(watchers)}")
        return F.leaky_relu(x, self.negative_slope)
