"""Paths and configs shared by the tests."""

import threading
from pathlib import Path

from pytest_cudaagent import EvalConfig, TimingConfig

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
PROBLEMS = EXAMPLES / "problems"
CPU_CANDIDATES = EXAMPLES / "candidates" / "cpu"
CUDA_CANDIDATES = EXAMPLES / "candidates" / "cuda"
DATA = REPO / "tests" / "data"
TEST_PROBLEMS = DATA / "problems"
TEST_CANDIDATES = DATA / "candidates"

# Small budgets: the tests check behaviour, not speed.
QUICK_TIMING = TimingConfig(warmup_ms=5, repeat_ms=20, min_samples=6, max_samples=60)


def cpu_config(**overrides) -> EvalConfig:
    settings = dict(device="cpu", timing=False, baselines=(), run_timeout_s=120, timing_config=QUICK_TIMING)
    settings.update(overrides)
    return EvalConfig(**settings)


def outcomes(result) -> set[tuple[str, str | None]]:
    """(status, rule) for each violation of a Result, and (status, None): what an adversarial
    test's expected set is matched against."""
    return {(result.status, violation.rule) for violation in result.violations} | {(result.status, None)}


def admitting(gate, footprint, admitted: list, problem: str = "small") -> threading.Thread:
    """A pair's admission at `gate` (memory_gate.Gate) in a thread of its own, started: how it
    was admitted is appended to `admitted` once it is, and its hold released at once."""
    def admit() -> None:
        with gate.shared("admit", problem) as hold:
            hold.admit(footprint)
            admitted.append(hold.admitted)

    thread = threading.Thread(target=admit)
    thread.start()
    return thread
