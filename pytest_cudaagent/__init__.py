"""cuda-agent's evaluator: verify and time a candidate kernel against its PyTorch reference.

Plain Python, usable without pytest: `evaluate(problem, candidate, config) -> Result`.
"""

from .core.config import EvalConfig, RewardConfig, TimingConfig
from .core.files import BadFileError
from .core.result import Result, TimingStats, TrialResult, Violation
from .core.reward import milestone_reward

__all__ = [
    "BadFileError",
    "EvalConfig",
    "ProblemError",
    "Result",
    "RewardConfig",
    "TimingConfig",
    "TimingStats",
    "TrialResult",
    "Violation",
    "evaluate",
    "milestone_reward",
]


def __getattr__(name: str):
    # The evaluation core imports torch (seconds on a GPU machine: 5.5 s on the H100 one); a
    # process that only reads Results or configs, such as pytest-xdist's controller or the
    # `cudaagent bench` parent, never loads it.
    if name in ("evaluate", "ProblemError"):
        from . import evaluation

        globals()[name] = value = getattr(evaluation, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
