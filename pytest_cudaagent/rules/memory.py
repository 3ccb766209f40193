"""Poisons the GPU memory the caching allocator holds but nobody uses, before a candidate call:
an output left uninitialised (`empty`) then reads NaN instead of an earlier answer."""

from __future__ import annotations

import torch

POISON_BYTE = 0xFF  # all-ones bytes are NaN in fp32, fp16 and bf16, and -1 in integer types


def poison_free_memory(device: str, expected_nbytes: list[int] = ()) -> int:
    """Fill every free block of the allocator's cache, and first park poisoned blocks of each
    expected output's size in it: a fresh cudaMalloc hands back whatever the physical memory
    last held (seen on an H100: a first output allocation read 35% of the right answer), while
    a cached block of the right size is what `empty` reuses. Returns the bytes poisoned."""
    if device != "cuda":
        return 0
    primed = []
    for nbytes in expected_nbytes:
        for _ in range(2):  # two of each: an output and a same-sized temporary
            try:
                primed.append(torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device=device).fill_(POISON_BYTE))
            except torch.OutOfMemoryError:
                break
    del primed
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
