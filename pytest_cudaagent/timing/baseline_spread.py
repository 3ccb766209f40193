"""Whether a baseline's spread is narrow enough to divide a speedup by; re-measuring until it is.

A baseline is kept (and cached) with its spread, so `unstable_baseline` is decided again from the
numbers whenever it is read: a cached wide baseline flags every later Result that uses it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.config import TimingConfig
from ..core.result import TimingStats, Violation

RULE = "unstable_baseline"  # a contract: the leaderboard leaves these rows out of headline geomeans


def relative_spread(stats: TimingStats, in_rounds: bool = False) -> float:
    """The IQR over the median; for a baseline of a candidate timed in rounds, whose speedups
    divide lower deciles (Evaluation._speedups), the span of its 5th to 20th percentile over the
    lower decile: a host that switches between two speeds widens the IQR of every launch-bound call,
    and what the speedup needs is that the fast host's time holds still."""
    if in_rounds and stats.fast_ms and stats.fast_spread_ms is not None:
        return stats.fast_spread_ms / stats.fast_ms
    return stats.iqr_ms / stats.median_ms if stats.median_ms > 0 else float("inf")


def is_unstable(stats: TimingStats, timing: TimingConfig, in_rounds: bool = False) -> bool:
    return relative_spread(stats, in_rounds) > timing.unstable_spread


def steadiest(measure: Callable[[], TimingStats], timing: TimingConfig, in_rounds: bool = False) -> TimingStats:
    """`measure()` once, and again (up to `timing.baseline_remeasures` more times) while the
    spread (relative_spread) is too wide; the measurement with the narrowest spread is kept."""
    best = measure()
    for _ in range(timing.baseline_remeasures):
        if not is_unstable(best, timing, in_rounds):
            break
        again = measure()
        if relative_spread(again, in_rounds) < relative_spread(best, in_rounds):
            best = again
    return best


def unstable_warning(mode: str, stats: TimingStats, timing: TimingConfig, in_rounds: bool = False) -> Violation | None:
    if not is_unstable(stats, timing, in_rounds):
        return None
    if in_rounds:
        return Violation(RULE, f"{mode}: timed in rounds, lower decile {stats.fast_ms:.4g} ms, its 5th-20th "
                         f"percentile {stats.fast_spread_ms:.4g} ms apart ({relative_spread(stats, True):.0%} of it, "
                         f"above the {timing.unstable_spread:.0%} bound); a speedup against it is not a measurement")
    return Violation(RULE, f"{mode}: median {stats.median_ms:.4g} ms, IQR {stats.iqr_ms:.4g} ms "
                     f"({relative_spread(stats):.0%} of the median, above the {timing.unstable_spread:.0%} bound "
                     f"after up to {timing.baseline_remeasures} re-measurements); a speedup against it is not a measurement")
