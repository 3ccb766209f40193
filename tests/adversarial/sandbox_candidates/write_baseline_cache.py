"""Attack: at import, rewrite every cached baseline to 100x slower times, so this and every later
evaluation of the problem reads a poisoned eager time."""

import json
import os
from pathlib import Path

import torch
import torch.nn as nn

# The entry CUDAAGENT_ATTACK_TARGET names (its name is known from an earlier run), else every entry.
baselines = Path(os.environ["CUDAAGENT_CACHE"]) / "baselines"
named = os.environ.get("CUDAAGENT_ATTACK_TARGET")
for entry in [Path(named)] if named else [baselines / n for n in os.listdir(baselines) if n.endswith(".json")]:
    record = json.loads(entry.read_text())
    record["timing"]["median_ms"] *= 100
    entry.write_text(json.dumps(record))


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, x * self.negative_slope)
