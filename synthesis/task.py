"""A candidate task: KernelBench-format source plus what the pipeline knows about it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass
class Task:
    task_id: str
    source: str  # a complete KernelBench-format problem file
    origin: str  # "compose" (seeded random), "llm" (a model proposed it) or "file"
    operators: list[str] = field(default_factory=list)  # catalogue names, in order
    input_shapes: list[list[int]] = field(default_factory=list)
    dtype: str = "float32"

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]
