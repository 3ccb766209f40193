"""Single-turn CUDA tasks for the PPO warm-up: the prompt is a problem file, the answer one
Python file defining ModelNew (its kernels inline), and the reward the evaluator's milestone
reward of that file (-1 when there is no code, or it fails)."""

from __future__ import annotations

import random
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .environments import Task, ToolReply

CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
FAILED_REWARD = -1.0

INSTRUCTIONS = (
    "Write a Python file that defines class ModelNew, computing exactly what Model computes, faster, "
    "with your own CUDA kernels compiled inline (torch.utils.cpp_extension.load_inline). Answer with "
    "the whole file in one ```python block."
)


def extract_code(answer: str) -> str | None:
    """The last fenced Python block of the answer (models often sketch first, then finalise)."""
    blocks = CODE_BLOCK.findall(answer)
    return blocks[-1] if blocks else None


@dataclass
class CudaSingleTurnEnvironment:
    problems: str
    device: str = "cuda"
    # EvalConfig fields for scoring (e.g. {"trials": 5, "baselines": ["eager", "compile"]}).
    eval_options: dict = field(default_factory=dict)
    # Whose "correct" the reward follows: "kernelbench" or "cuda-agent" (as AgentLoopEnvironment).
    convention: str = "kernelbench"
    max_turns: int = 1

    def __post_init__(self):
        from policy.solve import find_problems

        self.problem_files = [str(p) for p in find_problems(self.problems)]

    def sample_tasks(self, count: int, rng: random.Random) -> list[Task]:
        tasks = []
        for index in range(count):
            problem = rng.choice(self.problem_files)
            source = Path(problem).read_text()
            messages = [
                {"role": "system", "content": "You are an expert CUDA kernel engineer."},
                {"role": "user", "content": f"{INSTRUCTIONS}\n\nmodel.py:\n```python\n{source}\n```"},
            ]
            tasks.append(Task(f"{Path(problem).stem}-{index}", messages, {"problem": problem}))
        return tasks

    def reply(self, task: Task, assistant_turns: list[str]) -> ToolReply | None:
        return None

    def candidate_source(self, task: Task, assistant_turns: list[str]) -> str | None:
        """The candidate file the episode wrote (None: no code, reward -1). Scorers that build
        their own files (scorer: xdist) call this, with `evaluator_config` and the task's problem."""
        return extract_code(assistant_turns[-1])

    def problem_file(self, task: Task) -> str:
        return task.payload["problem"]

    def evaluator_config(self, device: str):
        """The scoring worker's EvalConfig; a worker pinned to one GPU sees it as "cuda"."""
        from .rewards import evaluator_config

        return evaluator_config(device if self.device == "cuda" else "cpu", self.eval_options, self.convention)

    def score(self, task: Task, assistant_turns: list[str], device: str) -> float:
        from pytest_cudaagent import BadFileError, evaluate

        code = self.candidate_source(task, assistant_turns)
        if code is None:
            return FAILED_REWARD
        with tempfile.TemporaryDirectory(prefix="cudaagent-candidate-") as directory:
            candidate = Path(directory) / "candidate.py"
            candidate.write_text(code)
            try:
                result = evaluate(self.problem_file(task), str(candidate), self.evaluator_config(device))
            except BadFileError:
                return FAILED_REWARD
        return float(result.reward)
