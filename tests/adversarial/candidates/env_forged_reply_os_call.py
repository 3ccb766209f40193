"""Environment: a forged reply whose pickle names os.makedirs (no class of its own), sent with
the pipe's own send, as the worker's replies are."""

import gc
import multiprocessing.connection
import os

import torch.nn as nn

MARKER = "/tmp/cudaagent-forged-reply-env_forged_reply_os_call"


class _MakesADirectory:
    def __reduce__(self):
        return os.makedirs, (MARKER,)


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope
        self.sent = False

    def forward(self, x):
        if not self.sent:  # once, at the first trial
            self.sent = True
            for obj in gc.get_objects():
                if isinstance(obj, multiprocessing.connection.Connection) and not obj.closed:
                    obj.send({"kind": "forward", "outputs": [_MakesADirectory()]})
        return x.clamp_min(0) + self.slope * x.clamp_max(0)
