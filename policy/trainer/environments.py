"""What the trainer trains in: an environment hands out tasks, answers each assistant turn with a
tool message (or ends the episode) and scores finished episodes. Two scripted toy environments
live here for CPU tests and examples; the CUDA ones are in cuda_single_turn.py and agent_loop.py.

An environment must be picklable: episodes are scored in worker processes (rewards.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class Task:
    task_id: str
    messages: list[dict]
    # What the environment needs to answer and score this task (a target, a problem path, ...).
    payload: dict = field(default_factory=dict)


@dataclass
class ToolReply:
    message: dict
    # The assistant's turn was not a well-formed tool call (RFT drops such trajectories).
    invalid_tool_call: bool = False


class Environment(Protocol):
    max_turns: int

    def sample_tasks(self, count: int, rng: random.Random) -> list[Task]: ...

    def reply(self, task: Task, assistant_turns: list[str]) -> ToolReply | None:
        """The tool message answering the last turn, or None when the episode is over."""

    def score(self, task: Task, assistant_turns: list[str], device: str) -> float:
        """The episode's outcome reward; may run in a worker process pinned to `device`."""


DIGITS = tuple("0123456789")


@dataclass
class TargetTokenEnvironment:
    """Single turn: reward 1 when the answer contains any of `targets` (digits by default), else
    0. A random tiny model hits a digit in a short answer about one time in ten, so the task
    shows PPO and RFT lifting the reward from chance to near 1 in a few minutes on a CPU."""

    targets: tuple[str, ...] = DIGITS
    prompts: tuple[str, ...] = ("Say a number.", "Count something.", "Pick a digit.", "How many?")
    max_turns: int = 1

    def sample_tasks(self, count: int, rng: random.Random) -> list[Task]:
        tasks = []
        for index in range(count):
            prompt = rng.choice(self.prompts)
            messages = [{"role": "user", "content": prompt}]
            tasks.append(Task(f"target-{index}", messages, {"prompt": prompt}))
        return tasks

    def reply(self, task: Task, assistant_turns: list[str]) -> ToolReply | None:
        return None

    def score(self, task: Task, assistant_turns: list[str], device: str) -> float:
        return float(any(target in assistant_turns[-1] for target in self.targets))


@dataclass
class ScriptedToolEnvironment:
    """Multi-turn: every assistant turn is a "tool call" answered by a scripted tool message; the
    episode succeeds (reward 1) once a turn contains a target, and fails (reward 0) after
    `max_turns`. A turn with no visible text is an invalid tool call."""

    targets: tuple[str, ...] = DIGITS
    max_turns: int = 3
    system_prompt: str = "You are an agent. Call tools until you find a number."

    def sample_tasks(self, count: int, rng: random.Random) -> list[Task]:
        return [
            Task(
                f"scripted-{index}",
                [
                    {"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": f"Find the number in room {rng.randint(0, 99)}."},
                ],
            )
            for index in range(count)
        ]

    def _succeeded(self, assistant_turns: list[str]) -> bool:
        return any(target in turn for turn in assistant_turns for target in self.targets)

    def reply(self, task: Task, assistant_turns: list[str]) -> ToolReply | None:
        if self._succeeded(assistant_turns) or len(assistant_turns) >= self.max_turns:
            return None
        last_turn = assistant_turns[-1]
        return ToolReply(
            {"role": "tool", "name": "search", "content": f"room {len(assistant_turns)} is empty"},
            invalid_tool_call=not last_turn.strip(),
        )

    def score(self, task: Task, assistant_turns: list[str], device: str) -> float:
        return float(self._succeeded(assistant_turns))


@dataclass
class PromptOutcomeEnvironment:
    """Single turn whose reward the prompt alone decides ("open" rooms pay 1, "locked" rooms 0),
    whatever the answer: for value pretraining, a critic that reads the prompt can explain all
    of the return's variance, and an untrained one explains none."""

    max_turns: int = 1

    def sample_tasks(self, count: int, rng: random.Random) -> list[Task]:
        tasks = []
        for index in range(count):
            state = rng.choice(("open", "locked"))
            messages = [{"role": "user", "content": f"The room is {state}. Describe it."}]
            tasks.append(Task(f"room-{index}", messages, {"state": state}))
        return tasks

    def reply(self, task: Task, assistant_turns: list[str]) -> ToolReply | None:
        return None

    def score(self, task: Task, assistant_turns: list[str], device: str) -> float:
        return float(task.payload["state"] == "open")
