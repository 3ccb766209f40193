"""Baseline times on disk, keyed by problem source, device, torch version, mode, timer settings and
the backend settings timed under, so a batch of candidates for one problem pays for eager and
torch.compile once (once more per distinct backend settings candidates switch to).

Each entry carries an HMAC tag under a key that only the evaluator can read (a 0600 file in the
cache, which the sandbox hides from candidates): an entry changed or written by anyone else is
rejected, reported and measured again."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

from ..core.config import TimingConfig
from ..core.result import TimingStats
from ..system.envinfo import device_name
from .locks import file_lock

# Bumped whenever the loop that times a baseline changes, so no time measured by an older loop is
# read back as this one's (2: on the CPU, the candidate's own loop, worker.timed_as_the_candidate;
# 3: on the GPU too; 4: each call loads its inputs from memory of its own; 5: a host-bound call
# timed over TimingConfig.host_bound_repeat_ms).
LOOP_VERSION = 5


class BaselineCache:
    def __init__(self, root: Path):
        self.root = Path(root) / "baselines"
        self.rejected: list[str] = []  # why entries were not trusted, for the Result's warnings

    def key(self, problem: Path, device: str, mode: str, timing: TimingConfig, convention: str,
            backend_settings: dict) -> str:
        """The convention is part of the key (training mode, with BatchNorm on batch statistics and
        Dropout, times differently from eval mode), and so are the backend settings timed under."""
        import torch

        digest = hashlib.sha256()
        digest.update(Path(problem).read_bytes())
        for part in (LOOP_VERSION, device, device_name(device), torch.__version__, mode, convention,
                     json.dumps(dataclasses.asdict(timing), sort_keys=True), json.dumps(backend_settings, sort_keys=True)):
            digest.update(b"\0" + str(part).encode())
        return digest.hexdigest()[:24]

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def lock(self, key: str):
        return file_lock(self.root / f"{key}.lock")

    def get(self, key: str) -> TimingStats | None:
        try:
            data = json.loads(self.path(key).read_text())
            stats = TimingStats(**data["timing"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # missing, or not an entry
            return None
        tag = data.pop("tag", None)
        if tag is None or not hmac.compare_digest(str(tag), self._tag(data)):
            self.rejected.append(f"cached baseline {self.path(key).name} was changed outside the evaluator "
                                 f"({'no integrity tag' if tag is None else 'its tag does not match'}); measured again")
            return None
        return stats

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
        record["tag"] = self._tag(record)
        temporary = self.path(key).with_suffix(".tmp")
        temporary.write_text(json.dumps(record, indent=1))
        temporary.replace(self.path(key))

    def _tag(self, record: dict) -> str:
        return hmac.new(self._secret(), json.dumps(record, sort_keys=True).encode(), hashlib.sha256).hexdigest()

    def _secret(self) -> bytes:
        """The key, made on first use; linked into place so two evaluators starting at once agree."""
        path = self.root / "hmac.key"
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f"hmac.key.{os.getpid()}")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(os.urandom(32))
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass
            finally:
                temporary.unlink()
        return path.read_bytes()
