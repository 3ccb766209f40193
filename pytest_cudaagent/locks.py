"""One timing at a time per device: a file lock shared by every process on the machine."""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


def device_key(device: str) -> str:
    """A name for the physical device, the same in every process whatever CUDA_VISIBLE_DEVICES
    says, so two xdist workers pinned to one GPU take the same lock."""
    if device != "cuda":
        return "cpu"
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    return f"gpu-{uuid}" if uuid is not None else f"gpu-{props.name}-{props.pci_bus_id}".replace(" ", "_")


def lock_dir() -> Path:
    """The timing locks' own directory: a sandboxed candidate may create and lock files here, and
    nowhere else outside its scratch space (sandbox.py)."""
    return Path(os.environ.get("CUDAAGENT_LOCK_DIR", tempfile.gettempdir())) / "cudaagent-locks"


def lock_path(device: str) -> Path:
    return lock_dir() / f"cudaagent-timing-{device_key(device)}.lock"


@contextmanager
def device_lock(device: str):
    """Held for the whole of a timing. With CUDAAGENT_LOCK_LOG set, each hold is logged as
    `pid acquired_ns released_ns` so a run can show that timings never overlapped."""
    path = lock_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        acquired_ns = time.time_ns()
        try:
            yield path
        finally:
            released_ns = time.time_ns()
            fcntl.flock(handle, fcntl.LOCK_UN)
            log = os.environ.get("CUDAAGENT_LOCK_LOG")
            if log:
                with open(log, "a") as log_handle:
                    log_handle.write(f"{device_key(device)} {os.getpid()} {acquired_ns} {released_ns}\n")


@contextmanager
def file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
