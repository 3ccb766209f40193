"""Baseline times on disk, keyed by problem source, device, torch version, mode, timer settings and
the backend settings timed under, so a batch of candidates for one problem pays for eager and
torch.compile once (once more per distinct backend settings candidates switch to)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

from .config import TimingConfig
from .envinfo import device_name
from .locks import file_lock
from .result import TimingStats


class BaselineCache:
    def __init__(self, root: Path):
        self.root = Path(root) / "baselines"

    def key(self, problem: Path, device: str, mode: str, timing: TimingConfig, convention: str,
            backend_settings: dict) -> str:
        """The convention is part of the key (training mode, with BatchNorm on batch statistics and
        Dropout, times differently from eval mode), and so are the backend settings timed under."""
        import torch

        digest = hashlib.sha256()
        digest.update(Path(problem).read_bytes())
        for part in (device, device_name(device), torch.__version__, mode, convention,
                     json.dumps(dataclasses.asdict(timing), sort_keys=True), json.dumps(backend_settings, sort_keys=True)):
            digest.update(b"\0" + str(part).encode())
        return digest.hexdigest()[:24]

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def lock(self, key: str):
        return file_lock(self.root / f"{key}.lock")

    def get(self, key: str) -> TimingStats | None:
        try:
            return TimingStats(**json.loads(self.path(key).read_text())["timing"])
        except (OSError, ValueError, KeyError, TypeError):  # missing, or not an entry: measure again
            return None

    def put(self, key: str, stats: TimingStats, problem: Path, device: str, mode: str,
            backend_settings: dict | None = None) -> None:
        import torch

        self.root.mkdir(parents=True, exist_ok=True)
        record = {
            "problem": str(problem),
            "mode": mode,
            "device": device,
            "device_name": device_name(device),
            "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "timing": dataclasses.asdict(stats),
            "backend_settings": backend_settings,
        }
        temporary = self.path(key).with_suffix(".tmp")
        temporary.write_text(json.dumps(record, indent=1))
        temporary.replace(self.path(key))
