"""Builds a scripted epilogue on its first call with the scale read once as a Python float
(`.item()` on its own parameter, never on anything computed from the inputs), and reuses it."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.tensor(1.75))
        self._epilogue = None
        self._scale_value = None

    def _setup(self):
        self._scale_value = float(self.scale.detach().item())
        bound = 1.0 / abs(self._scale_value)

        def epilogue(y: torch.Tensor, scale: float, bound: float) -> torch.Tensor:
            return torch.clamp(y, -bound, bound) * scale

        try:
            self._epilogue = torch.jit.script(epilogue)
        except Exception:
            self._epilogue = epilogue
        self._bound = bound

    def forward(self, x):
        if self._epilogue is None:
            self._setup()
        return self._epilogue(F.linear(x, self.linear.weight, self.linear.bias), self._scale_value, self._bound)
