"""What an out-of-memory error looks like in a worker's error or log, and how a verdict names it.

Under sharing such an error is no verdict (memory_gate.py: the evaluation is retried with the
device to itself); with the device to itself it is the candidate's `runtime_error`, naming how
much it asked for and what the device had, where the error says.
"""

from __future__ import annotations

import re

# Out of memory however it surfaces: torch's caching allocator (OutOfMemoryError, "CUDA out of
# memory. Tried to allocate ..."), the CUDA runtime or driver (a context that cannot be made:
# `torch.empty(1, device=...)` in worker.open_gpu read "CUDA error: out of memory"), cuBLAS and
# cuDNN workspaces (CUBLAS_STATUS_ALLOC_FAILED, CUDNN_STATUS_ALLOC_FAILED), Triton's allocator, and
# the host's (torch's DefaultCPUAllocator, C++'s std::bad_alloc, numpy's MemoryError). Triton's
# "out of resource: shared memory" is a kernel asking more than an SM has, not memory others hold.
_SIGNS = re.compile(
    r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
    r"|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|DefaultCPUAllocator: can't allocate memory"
    r"|std::bad_alloc|\bMemoryError\b",
    re.IGNORECASE,
)
# torch's own numbers: "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of
# which 27.06 MiB is free." and the CPU allocator's "you tried to allocate 2147483648 bytes".
_ASKED = re.compile(r"[Tt]ried to allocate (\d+(?:\.\d+)? ?[KMGT]?i?B|\d+ bytes)")
_HAD = re.compile(r"total capacity of (\d+(?:\.\d+)? ?[KMGT]?i?B) of which (\d+(?:\.\d+)? ?[KMGT]?i?B) is free")


def out_of_memory(*texts: str | None) -> str | None:
    """The first line of `texts` that says memory ran out, or None."""
    for text in texts:
        for line in (text or "").splitlines():
            if _SIGNS.search(line):
                return line.strip()[:1000]
    return None


def asked_and_had(text: str) -> str:
    """"asked for 2.00 GiB with 27.06 MiB of 79.19 GiB free", as much of it as the error says."""
    asked, had = _ASKED.search(text), _HAD.search(text)
    parts = [f"asked for {asked.group(1)}" if asked else "asked for an amount the error does not say"]
    parts.append(f"with {had.group(2)} of {had.group(1)} free" if had else "with what was free unsaid")
    return " ".join(parts)


def verdict_error(line: str, error: str | None) -> str:
    """The candidate's runtime_error for an out-of-memory error with the device to itself."""
    return (f"out of memory with the device to itself ({asked_and_had(line)}): "
            f"{(error or line).strip().splitlines()[-1][:1500]}")
