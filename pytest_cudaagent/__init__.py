"""cuda-agent's evaluator: verify and time a candidate kernel against its PyTorch reference.

Plain Python, usable without pytest: `evaluate(problem, candidate, config) -> Result`.
"""

from .config import EvalConfig, RewardConfig, TimingConfig
from .evaluate import ProblemError, evaluate
from .files import BadFileError
from .result import Result, TimingStats, TrialResult, Violation
from .reward import milestone_reward

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
