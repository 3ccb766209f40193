"""Correctness: returns an object of its own class that, unpickled in the evaluator, would run
code there (its __reduce__ calls exec) and compares equal to anything."""

import torch.nn as nn

MARKER = "/tmp/cudaagent-forged-reply-correct_returns_custom_object"


class Anything:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __reduce__(self):
        return exec, (f"open({MARKER!r}, 'w').write('ran in the evaluator')",)


class ModelNew(nn.Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.slope = negative_slope

    def forward(self, x):
        return Anything()
