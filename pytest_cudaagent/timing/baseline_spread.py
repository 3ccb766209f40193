"""Whether a baseline's spread is narrow enough to divide a speedup by; re-measuring until it is.

A baseline is kept (and cached) with its spread, so `unstable_baseline` is decided again from the
numbers whenever it is read: a cached wide baseline flags every later Result that uses it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.config import TimingConfig
from ..core.result import TimingStats, Violation

RULE = "unstable_baseline"  # a contract: the leaderboard leaves these rows out of headline geomeans


def relative_spread(stats: TimingStats) -> float:
    return stats.iqr_ms / stats.median_ms if stats.median_ms > 0 else float("inf")


def is_unstable(stats: TimingStats, timing: TimingConfig) -> bool:
    return relative_spread(stats) > timing.unstable_spread


def steadiest(measure: Callable[[], TimingStats], timing: TimingConfig) -> TimingStats:
    """`measure()` once, and again (up to `timing.baseline_remeasures` more times) while the
    spread is too wide; the measurement with the narrowest spread is kept."""
    best = measure()
    for _ in range(timing.baseline_remeasures):
        if not is_unstable(best, timing):
            break
        again = measure()
        if relative_spread(again) < relative_spread(best):
            best = again
    return best


def unstable_warning(mode: str, stats: TimingStats, timing: TimingConfig) -> Violation | None:
    if not is_unstable(stats, timing):
        return None
    return Violation(RULE, f"{mode}: median {stats.median_ms:.4g} ms, IQR {stats.iqr_ms:.4g} ms "
                     f"({relative_spread(stats):.0%} of the median, above the {timing.unstable_spread:.0%} bound "
                     f"after up to {timing.baseline_remeasures} re-measurements); a speedup against it is not a measurement")
