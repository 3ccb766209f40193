"""An LLM proposes fused tasks from sampled seed operators; its output goes through the same
filters as the random composer's. The one coupling to a rollout engine is `EngineAdapter`."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from .catalogue import Catalogue
from .task import Task

# A text generator: chat conversations in, one completion text per conversation out.
Generate = Callable[..., list[str]]

SYSTEM_PROMPT = """You write PyTorch problems for a CUDA kernel benchmark in KernelBench format.
A problem file defines `class Model(nn.Module)` with `__init__` and `forward`, a function
`get_inputs()` returning the list of input tensors, and `get_init_inputs()` returning the list of
constructor arguments. Put the batch dimension in a module-level constant `batch_size = N`.
Compose the given operators sequentially (each consumes the previous output) into one fused
computation. No randomness in forward, no dropout, outputs must depend on the inputs.
Answer with one ```python code block and nothing else."""

_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(text: str) -> str:
    """The last fenced code block, or the whole text when there is none."""
    blocks = _CODE_BLOCK.findall(text)
    return (blocks[-1] if blocks else text).strip() + "\n"


class EngineAdapter:
    """Wraps a policy rollout engine (`engine.generate(prompts, sampling) -> [Completion]`,
    policy/engines.py) as a `Generate` callable."""

    def __init__(self, engine, sampling_params_type=None):
        self.engine = engine
        self.sampling_params_type = sampling_params_type

    def __call__(self, conversations: list[list[dict]], **sampling) -> list[str]:
        params_type = self.sampling_params_type
        if params_type is None:
            try:
                from policy.engines import SamplingParams as params_type
            except ImportError as error:
                raise ImportError(
                    "policy.engines.SamplingParams is not available; pass sampling_params_type= "
                    "to EngineAdapter, or give LLMComposer any generate(conversations, **sampling) callable"
                ) from error
        completions = self.engine.generate(conversations, params_type(**sampling))
        return [getattr(c, "text", c) for c in completions]


class LLMComposer:
    """Proposer (see pipeline.Proposer) backed by a language model."""

    origin = "llm"

    def __init__(self, catalogue: Catalogue, generate: Generate, seed: int = 0,
                 min_ops: int = 2, max_ops: int = 5, temperature: float = 0.8, max_tokens: int = 2048):
        self.operators = catalogue.operators
        if not self.operators:
            raise ValueError("the catalogue is empty; crawl first (`cudaagent synth crawl`)")
        self.generate = generate
        self.seed = seed
        self.min_ops, self.max_ops = min_ops, max_ops
        self.sampling = {"temperature": temperature, "max_tokens": max_tokens}

    def task_id(self, index: int) -> str:
        return f"llm_{self.seed}_{index:06d}"

    def seed_operators(self, index: int) -> list[str]:
        rng = random.Random(f"llm:{self.seed}:{index}")
        count = rng.randint(self.min_ops, min(self.max_ops, len(self.operators)))
        return [op.target for op in rng.sample(self.operators, count)]

    def messages(self, operators: list[str]) -> list[dict]:
        listing = "\n".join(f"{i}. {name}" for i, name in enumerate(operators, 1))
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Fuse these operators, in this order:\n{listing}"},
        ]

    def propose(self, index: int) -> Task:
        return self.propose_many([index])[0]

    def propose_many(self, indices: list[int]) -> list[Task]:
        """One batched generate call for several tasks (engines batch far better than loops)."""
        chosen = [self.seed_operators(i) for i in indices]
        texts = self.generate([self.messages(ops) for ops in chosen], **self.sampling)
        return [
            Task(self.task_id(i), extract_code(text), self.origin, ops)
            for i, ops, text in zip(indices, chosen, texts, strict=True)
        ]
