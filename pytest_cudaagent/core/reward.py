"""The paper's milestone reward, computed from a Result."""

from __future__ import annotations

from .config import RewardConfig
from .result import Result


def milestone_reward(result: Result, config: RewardConfig | None = None) -> float:
    """-1: does not build, run or pass; 1: correct; 2: also faster than eager by the threshold;
    3: also faster than torch.compile by the threshold. An implausible speedup waiting for review
    earns at most 2."""
    config = config or RewardConfig()
    if not result.passed:
        return -1.0
    reward = 1.0
    if result.speedup_vs_eager is not None and result.speedup_vs_eager > config.eager_speedup:
        reward = 2.0
        flagged = any(w.rule == "implausible_speedup" for w in result.warnings)
        if (
            not flagged
            and result.speedup_vs_compile is not None
            and result.speedup_vs_compile > config.compile_speedup
        ):
            reward = 3.0
    return reward
