"""Seeded random composition of 1 to 5 catalogue operators into one task, with every step's
arguments bound to the shape the previous step produced, so every task is valid by construction.
Task `index` under `seed` is always the same task, whichever process makes it."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from .catalogue import Catalogue, OperatorSpec
from .recipes import BoundOp, NotApplicable, bind, propagate
from .render import render_task
from .task import Task


@dataclass
class ComposerConfig:
    min_ops: int = 1
    max_ops: int = 5  # the paper composes up to five operators
    dtypes: tuple[str, ...] = ("float32",)  # KernelBench's problems are fp32
    batch_sizes: tuple[int, ...] = (8, 16, 32, 64)
    feature_sizes: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)  # dim 1 (features, channels)
    spatial_sizes: tuple[int, ...] = (8, 16, 32, 64, 128)  # later dimensions of rank 3-5 inputs
    # Elements of the input and of every intermediate, and matmul/convolution FLOPs of the whole
    # chain, at the starting batch: small, because the workload filter scales the batch up to
    # the runtime window, and a first run of a 5-D convolution on a huge input would take
    # minutes before any filter could say it is too slow.
    min_sample_numel: int = 256
    max_numel: int = 1 << 22
    max_flops: float = 2e10
    # Operators with weights (GEMM, convolution, norms) make the tasks worth fusing around.
    weighted_op_boost: float = 3.0
    layout_op_weight: float = 0.3
    attempts_per_step: int = 30


class Composer:
    """Proposes task `index` of the stream `seed` (see pipeline.Proposer)."""

    origin = "compose"

    def __init__(self, catalogue: Catalogue, config: ComposerConfig | None = None, seed: int = 0):
        self.config = config or ComposerConfig()
        self.seed = seed
        self.operators = [op for op in catalogue.operators if set(op.dtypes) & set(self.config.dtypes)]
        if not self.operators:
            raise ValueError(
                "the catalogue has no operator for dtypes "
                f"{self.config.dtypes}; crawl again or choose other --dtypes"
            )
        # Each source gets an equal share, so 40 special functions do not crowd out nn.
        per_source: dict[str, int] = {}
        for op in self.operators:
            per_source[op.source] = per_source.get(op.source, 0) + 1
        self.weights = [self._weight(op) / per_source[op.source] for op in self.operators]

    def _weight(self, op: OperatorSpec) -> float:
        if op.category == "layout":
            return self.config.layout_op_weight
        return self.config.weighted_op_boost if op.has_weights else 1.0

    def _input_shape(self, rank: int, rng: random.Random) -> tuple[int, ...]:
        config = self.config
        for _ in range(100):
            shape = [rng.choice(config.batch_sizes)]
            if rank >= 2:
                shape.append(rng.choice(config.feature_sizes))
            shape += [rng.choice(config.spatial_sizes) for _ in range(rank - 2)]
            if rank == 1:
                shape = [rng.choice(config.batch_sizes) * rng.choice(config.feature_sizes)]
            per_sample = math.prod(shape[1:] or [shape[0]])
            if config.min_sample_numel <= per_sample and math.prod(shape) <= config.max_numel:
                return tuple(shape)
        return tuple(shape)

    def _step(self, shape: tuple[int, ...], dtype: str, rng: random.Random,
              flops_left: float) -> tuple[BoundOp, float] | None:
        rank = len(shape)
        fitting = [(op, w) for op, w in zip(self.operators, self.weights, strict=True) if rank in op.ranks and dtype in op.dtypes]
        if not fitting:
            return None
        ops, weights = zip(*fitting, strict=True)
        for _ in range(self.config.attempts_per_step):
            op = rng.choices(ops, weights)[0]
            try:
                bound = bind(op, shape, rng)
                with FlopCounterMode(display=False) as counter:
                    out = propagate(bound, getattr(torch, dtype))
            except (NotApplicable, RuntimeError, ValueError, TypeError, IndexError):
                continue
            flops = counter.get_total_flops()
            if (out and out[0] == shape[0] and all(out) and math.prod(out) <= self.config.max_numel
                    and flops <= flops_left):
                return bound, flops
        return None

    def task_id(self, index: int) -> str:
        return f"synth_{self.seed}_{index:06d}"

    def propose(self, index: int) -> Task:
        return self.compose(index, self.seed)

    def compose(self, index: int, seed: int) -> Task:
        """Task `index` of the stream `seed`."""
        rng = random.Random(f"{seed}:{index}")
        config = self.config
        for _ in range(50):
            dtype = rng.choice(config.dtypes)
            first = rng.choices(self.operators, self.weights)[0]
            if dtype not in first.dtypes:
                continue
            shape = self._input_shape(rng.choice(first.ranks), rng)
            length = rng.randint(config.min_ops, config.max_ops)
            chain: list[BoundOp] = []
            current, flops_left = shape, config.max_flops
            for _ in range(length):
                step = self._step(current, dtype, rng, flops_left)
                if step is None:
                    break
                bound, flops = step
                chain.append(bound)
                current, flops_left = bound.out_shape, flops_left - flops
            if len(chain) >= config.min_ops and any(b.spec.category == "compute" for b in chain):
                task_id = f"synth_{seed}_{index:06d}"
                source = render_task(chain, shape, dtype, title=f"Synthesized task {task_id}")
                return Task(task_id, source, "compose", [b.spec.name for b in chain], [list(shape)], dtype)
        raise RuntimeError(
            f"no valid composition found for task {index} under seed {seed}; the catalogue may be "
            "too small: crawl more sources (`cudaagent synth crawl`)"
        )
