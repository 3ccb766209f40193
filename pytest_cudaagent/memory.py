"""Poisons the GPU memory the caching allocator holds but nobody uses, before a candidate call:
an output left uninitialised (`empty`) then reads NaN instead of an earlier answer."""

from __future__ import annotations

import torch

POISON_BYTE = 0xFF  # all-ones bytes are NaN in fp32, fp16 and bf16, and -1 in integer types


def poison_free_memory(device: str) -> int:
    """Fill every free block of the allocator's cache; returns the bytes poisoned."""
    if device != "cuda":
        return 0
    free_blocks = [
        block["size"]
        for segment in torch.cuda.memory_snapshot()
        for block in segment["blocks"]
        if block["state"] == "inactive"
    ]
    # Largest first, each allocated at exactly its size: best-fit hands back that very block.
    held, poisoned = [], 0
    for size in sorted(free_blocks, reverse=True):
        try:
            block = torch.empty(size, dtype=torch.uint8, device=device)
        except torch.OutOfMemoryError:
            continue
        block.fill_(POISON_BYTE)
        held.append(block)
        poisoned += size
    del held
    return poisoned
