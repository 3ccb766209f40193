"""One GPU per pytest-xdist worker: `gw<N>` gets the N-th visible GPU (round robin), set in
CUDA_VISIBLE_DEVICES before CUDA starts in that worker and inherited by its child processes.
Two workers on one GPU share it; the per-GPU timing lock keeps their timings apart."""

from __future__ import annotations

import os


def visible_gpus() -> list[str]:
    """The GPUs this process may use, without starting CUDA (NVML, or CUDA_VISIBLE_DEVICES)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [entry.strip() for entry in visible.split(",") if entry.strip() and entry.strip() != "-1"]
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [str(index) for index in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no NVML: no GPU to pin
        return []


def pin_xdist_worker_to_gpu(worker_id: str | None) -> str | None:
    """Returns the GPU chosen for this worker, or None when not an xdist worker or no GPU."""
    if not worker_id or not worker_id.startswith("gw"):
        return None
    gpus = visible_gpus()
    if not gpus:
        return None
    chosen = gpus[int(worker_id[2:]) % len(gpus)]
    os.environ["CUDA_VISIBLE_DEVICES"] = chosen
    return chosen
