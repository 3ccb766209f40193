"""The adapter from the agent's ReAct loop (policy.solve / policy.agent) to the trainer: episodes
run in real workspaces with the actor behind a TransformersEngine (so updated weights are used at
once), rewards come from the agent's evaluation pool (one worker per GPU), and each of an
episode's token sequences becomes one Rollout sharing the episode's reward."""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .rollout import Rollout


def _turns_and_invalid_calls(trajectory_path: Path) -> tuple[list[str], int]:
    from policy.trajectory import read_events

    events = read_events(trajectory_path)
    turns = [e["content"] for e in events if e["event"] == "message" and e.get("role") == "assistant"]
    invalid = sum(1 for e in events if e["event"] == "parse_error")
    return turns, invalid


def rollouts_from_outcome(outcome) -> list[Rollout]:
    """One Rollout per token sequence of the episode (a new one starts where the agent shortened
    old context): each is exactly what the model saw when it wrote its tokens."""
    turns, invalid_calls = _turns_and_invalid_calls(Path(outcome.trajectory))
    training = outcome.training
    rollouts = []
    for index, sequence in enumerate(training.sequences):
        if not sequence.model_token_count():
            continue
        rollouts.append(Rollout(
            task_id=f"{training.problem}-{training.sample}-{index}",
            token_ids=list(sequence.token_ids),
            action_mask=list(sequence.model_mask),
            sampler_logprobs=[lp if lp is not None else 0.0 for lp in sequence.logprobs],
            assistant_turns=turns,
            invalid_tool_calls=invalid_calls,
            truncated=training.stop_reason in ("turns", "context", "wall_clock"),
            reward=float(training.reward),
        ))
    return rollouts


@dataclass
class AgentLoopEnvironment:
    """Multi-turn CUDA tasks: `problems` is a problem file or a directory of them (e.g. the
    synthesis output); `work_dir` receives each step's workspaces and trajectories."""

    problems: str
    work_dir: str = "runs/agent-episodes"
    device: str = "cuda"
    max_turns: int = 150  # the paper's training limit
    max_context_tokens: int = 131072
    parallel_episodes: int = 16
    generation_batch: int = 16
    gpus: list[str] | None = None
    agent_options: dict = field(default_factory=dict)
    # EvalConfig fields for the tools' and the final evaluations (e.g. {"trials": 5}); the
    # device is always this environment's.
    eval_options: dict = field(default_factory=dict)
    # Whose "correct" the verify tool and the reward follow: "kernelbench" or "cuda-agent".
    convention: str = "kernelbench"

    def __post_init__(self):
        from policy.evaluation_pool import EvaluationPool
        from policy.solve import find_problems

        self.problem_files = find_problems(self.problems)
        self.pool = EvaluationPool(self.device, self.gpus)

    def run_episodes(self, model, tokenizer, rng: random.Random, count: int, rollout_config, step: int,
                     engine=None) -> list[Rollout]:
        """`count` episodes; `engine`: a token engine that already holds the actor's weights (the
        trainer's vLLM one), else a TransformersEngine over `model` for these episodes."""
        from rich.console import Console

        from policy.engines import SamplingConfig, TransformersEngine
        from policy.solve import solve

        problems = [rng.choice(self.problem_files) for _ in range(count)]
        out_dir = Path(self.work_dir) / f"step-{step:06d}-{rng.randrange(1 << 30):08x}"
        shutil.rmtree(out_dir, ignore_errors=True)  # a resumed step replays its episodes afresh
        own_engine = engine is None
        if own_engine:
            engine = TransformersEngine(model, tokenizer, SamplingConfig(temperature=rollout_config.temperature),
                                        max_batch=self.generation_batch)
        try:
            # solve() names episodes by problem and sample, so repeats of a problem get distinct samples.
            outcomes = []
            for sample, chunk in enumerate(_distinct_chunks(problems)):
                config = self.solve_config(out_dir / f"round-{sample}", rollout_config.max_new_tokens)
                outcomes += solve(chunk, engine, config, pool=self.pool, console=Console(quiet=True))
        finally:
            if own_engine:
                engine.close()
                model.train()  # the engine switched it to eval mode
        return _at_most(count, [rollouts_from_outcome(outcome) for outcome in outcomes])

    def solve_config(self, out_dir: Path, max_new_tokens: int):
        """One round of episodes: the agent's budgets, and the evaluator on this environment's device
        (SolveConfig's own default toolbox evaluates on the CPU)."""
        from policy.agent import AgentConfig
        from policy.solve import SolveConfig
        from policy.tools import ToolboxConfig

        from .rewards import evaluator_config

        agent_config = AgentConfig(max_turns=self.max_turns, max_context_tokens=self.max_context_tokens,
                                   max_new_tokens=max_new_tokens, **self.agent_options)
        toolbox = ToolboxConfig(eval_config=evaluator_config(self.device, self.eval_options, self.convention))
        return SolveConfig(out_dir=out_dir, device=self.device, samples=1, parallel_episodes=self.parallel_episodes,
                           agent=agent_config, toolbox=toolbox)

    def close(self) -> None:
        self.pool.close()


def _at_most(count: int, per_episode: list[list[Rollout]]) -> list[Rollout]:
    """`count` rollouts: an episode whose context was shortened yields several sequences, but the
    PPO minibatch plan needs a fixed count, so the earliest sequences of such episodes go first
    (the last one holds the episode's ending, which the reward judges)."""
    rollouts = [r for episode in per_episode for r in episode]
    surplus = len(rollouts) - count
    kept = []
    for episode in per_episode:
        drop = min(max(surplus, 0), len(episode) - 1)
        surplus -= drop
        kept += episode[drop:]
    return kept


def _distinct_chunks(problems: list[Path]) -> list[list[Path]]:
    """Splits a list with repeats into lists without repeats (first occurrences first)."""
    chunks: list[list[Path]] = []
    for problem in problems:
        for chunk in chunks:
            if problem not in chunk:
                chunk.append(problem)
                break
        else:
            chunks.append([problem])
    return chunks
