"""Where training metrics go: one JSON line per step (metrics.jsonl, what a person or a plot reads)
and TensorBoard scalars and reward histograms. Only the main process writes."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import torch


def reward_summary(scores: torch.Tensor, pass_threshold: float) -> dict:
    """Mean, spread and distribution of episode rewards; a pass is a reward >= pass_threshold
    (1.0: the milestone reward's "correct", and the toy tasks' success)."""
    values = scores.float()
    counts = Counter(round(v, 3) for v in values.tolist())
    return {
        "reward_mean": values.mean().item(),
        "reward_std": values.std().item() if len(values) > 1 else 0.0,
        "reward_min": values.min().item(),
        "reward_max": values.max().item(),
        "pass_rate": (values >= pass_threshold).float().mean().item(),
        "reward_counts": {str(k): v for k, v in sorted(counts.items())},
    }


class MetricsLogger:
    def __init__(self, log_dir: str | Path, stage: str, tensorboard: bool = True, enabled: bool = True):
        self.stage = stage
        self.enabled = enabled
        self.log_dir = Path(log_dir)
        self.jsonl_path = self.log_dir / "metrics.jsonl"
        self._writer = None
        if enabled:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.log_dir / "tensorboard"))

    def log(self, step: int, metrics: dict, histograms: dict[str, torch.Tensor] | None = None) -> None:
        if not self.enabled:
            return
        record = {"stage": self.stage, "step": step, **metrics}
        with self.jsonl_path.open("a") as jsonl:
            jsonl.write(json.dumps(record, default=float) + "\n")
        if self._writer is not None:
            for name, value in metrics.items():
                if isinstance(value, (int, float)) and not math.isnan(value):
                    self._writer.add_scalar(f"{self.stage}/{name}", value, step)
            for name, values in (histograms or {}).items():
                self._writer.add_histogram(f"{self.stage}/{name}", values.float().cpu(), step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_metrics(jsonl_path: str | Path) -> list[dict]:
    """The logged records, oldest first (for tests, plots and resume checks)."""
    path = Path(jsonl_path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
