"""Run the agent over a problem set, several episodes at once, and write what the leaderboard and
the trainer read:

    OUT/candidates/<problem stem>_sample_<k>/   the final workspace (a workspace candidate)
    OUT/trajectories/<problem stem>_sample_<k>.jsonl   the episode's record
    OUT/results.jsonl   one final Result.to_json() per episode
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pytest_cudaagent.core.files import BadFileError, check_problem
from pytest_cudaagent.terminal import console as console_for_output

from .agent import Agent, AgentConfig, EpisodeOutcome
from .engines import Engine
from .evaluation_pool import EvaluationPool
from .tools import Toolbox, ToolboxConfig
from .trajectory import TrajectoryWriter
from .workspace import Workspace


@dataclass
class SolveConfig:
    out_dir: Path
    device: str = "cpu"  # "cuda" or "cpu"; also the evaluator's device
    samples: int = 1  # episodes per problem
    parallel_episodes: int = 4
    agent: AgentConfig = field(default_factory=AgentConfig)
    toolbox: ToolboxConfig = field(default_factory=ToolboxConfig)
    gpus: list[str] | None = None  # evaluator GPUs; default: every visible one
    evaluations_per_gpu: int = 1


def find_problems(path: str | Path) -> list[Path]:
    """One problem file, or every problem file (Model, get_inputs, get_init_inputs) in a directory."""
    path = Path(path)
    if path.is_file():
        return [check_problem(path)]
    if not path.is_dir():
        raise BadFileError(f"{path}: no such problem file or directory")
    problems = []
    for candidate in sorted(path.glob("*.py")):
        try:
            problems.append(check_problem(candidate))
        except BadFileError:
            continue  # helpers and __init__.py live next to problems
    if not problems:
        raise BadFileError(f"{path}: no problem files (a problem defines Model, get_inputs, get_init_inputs)")
    return problems


def episode_name(problem: Path, sample: int) -> str:
    return f"{problem.stem}_sample_{sample}"


def solve(problems: list[Path], engine: Engine, config: SolveConfig, pool: EvaluationPool | None = None,
          console: Console | None = None) -> list[EpisodeOutcome]:
    out = Path(config.out_dir)
    candidates_dir = out / "candidates"
    if candidates_dir.is_dir() and any(candidates_dir.iterdir()):
        raise BadFileError(f"{candidates_dir} already holds candidates; give a fresh --out directory")
    candidates_dir.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.jsonl"
    results_path.write_text("")
    console = console or console_for_output(stderr=True)
    agent = Agent(engine, config.agent)
    own_pool = pool is None
    pool = pool or EvaluationPool(config.device, config.gpus, config.evaluations_per_gpu)
    results_lock = threading.Lock()

    def run_episode(problem: Path, sample: int) -> EpisodeOutcome:
        name = episode_name(problem, sample)
        workspace = Workspace.create(problem, candidates_dir / name, config.device)
        writer = TrajectoryWriter(out / "trajectories" / f"{name}.jsonl")
        try:
            outcome = agent.run(Toolbox(workspace, pool, config.toolbox), writer, sample)
        finally:
            writer.close()
        with results_lock, results_path.open("a") as results:
            results.write(outcome.result.to_json() + "\n")
        return outcome

    jobs = [(problem, sample) for problem in problems for sample in range(config.samples)]
    outcomes: list[EpisodeOutcome] = []
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=False) as progress, \
                ThreadPoolExecutor(config.parallel_episodes, thread_name_prefix="episode") as executor:
            task = progress.add_task(f"solving with {engine.name}", total=len(jobs))
            futures = [executor.submit(run_episode, problem, sample) for problem, sample in jobs]
            for future in as_completed(futures):
                outcome = future.result()
                outcomes.append(outcome)
                progress.advance(task)
                progress.console.log(f"{episode_name(outcome.problem, outcome.sample)}: {outcome.stop_reason} "
                                     f"after {outcome.turns} turns, {outcome.result.summary()}")
    finally:
        if own_pool:
            pool.close()
    outcomes.sort(key=lambda outcome: (outcome.problem.stem, outcome.sample))
    return outcomes


def outcome_table(outcomes: list[EpisodeOutcome]) -> Table:
    table = Table(title="episodes")
    for column in ("episode", "stop", "turns", "status", "reward", "vs eager", "vs compile"):
        table.add_column(column, no_wrap=True)
    for outcome in outcomes:
        result = outcome.result
        table.add_row(episode_name(outcome.problem, outcome.sample), outcome.stop_reason, str(outcome.turns),
                      result.status, f"{result.reward:g}", _speedup(result.speedup_vs_eager),
                      _speedup(result.speedup_vs_compile))
    return table


def _speedup(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"
