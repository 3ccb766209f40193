"""A timed request the evaluator's own view does not account for is timed again before it is a
verdict (#44): on the GPU, work of other processes stalled the loop around honest candidates'
calls (11 of 13 level-2 identity pairs flagged `timing_unaccounted` at 16 workers on the H200).
The check itself is outside_view's; here only what the evaluation does with its answer."""

from __future__ import annotations

from pytest_cudaagent import evaluate
from pytest_cudaagent.core.result import Violation
from pytest_cudaagent.rules import outside_view
from tests.helpers import DATA, TEST_PROBLEMS, cpu_config

PROBLEM = TEST_PROBLEMS / "small_leaky_relu.py"
CANDIDATE = DATA / "candidates" / "pytorch_leaky_relu.py"


def _tripping(monkeypatch, trips: int) -> list[int]:
    """The unaccounted-time check answers a violation on its first `trips` calls, then its own answer."""
    calls: list[int] = []
    real = outside_view.unaccounted_violation

    def check(found, device):
        calls.append(1)
        if len(calls) <= trips:
            return Violation(outside_view.UNACCOUNTED, f"injected on attempt {len(calls)}")
        return real(found, device)

    monkeypatch.setattr(outside_view, "unaccounted_violation", check)
    return calls


def test_a_request_over_the_allowance_once_is_timed_again_and_passes(monkeypatch):
    calls = _tripping(monkeypatch, trips=1)
    result = evaluate(PROBLEM, CANDIDATE, cpu_config(timing=True, policy="permissive"))
    # Two attempts, or three where a stall of the loaded 2-core box tripped the real check once.
    assert len(calls) in (2, 3)
    assert result.passed and not result.violations, result.summary()
    assert result.env["timed_again"][0] == "injected on attempt 1"
    assert len(result.env["timed_again"]) == len(calls) - 1


def test_a_request_over_the_allowance_every_time_is_the_violation(monkeypatch):
    calls = _tripping(monkeypatch, trips=99)
    config = cpu_config(timing=True, policy="permissive")
    result = evaluate(PROBLEM, CANDIDATE, config)
    assert len(calls) == config.timing_config.unaccounted_attempts == 3
    assert result.status == "violation" and result.reward == -1
    assert [violation.detail for violation in result.violations] == ["injected on attempt 3"]
    assert result.env["timed_again"] == ["injected on attempt 1", "injected on attempt 2"]
