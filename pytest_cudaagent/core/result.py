"""The one record of an evaluation: `Result`, and its JSON form (the file format)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

# nondeterministic_reference: the candidate disagreed on a trial where the reference disagrees
# with itself under the same seed, so nobody can be judged on it. Whose fault a status is: the
# candidate's (incorrect to violation, build_error also for a file that is no candidate: no
# ModelNew, a syntax error), the problem's (nondeterministic_reference; problem_error: its reference
# failed, so no candidate can be judged against it), the harness's (harness_error: an error of
# ours or of the machine, no verdict on anyone; evaluated again on resume).
STATUSES = ("passed", "incorrect", "build_error", "runtime_error", "timeout", "crashed", "violation",
            "nondeterministic_reference", "problem_error", "harness_error")
CANDIDATE_STATUSES = ("incorrect", "build_error", "runtime_error", "timeout", "crashed", "violation")
PROBLEM_STATUSES = ("nondeterministic_reference", "problem_error")
HARNESS_STATUSES = ("harness_error",)


@dataclass
class Violation:
    rule: str  # e.g. fallback_op, output_alias, tampering
    detail: str


@dataclass
class TrialResult:
    index: int
    correct: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatches: int | None = None  # elements outside tolerance, NaN/Inf position differences too
    numel: int | None = None
    error: str | None = None  # why the trial failed, in words


@dataclass
class TimingStats:
    median_ms: float
    iqr_ms: float
    samples: int
    device_ms: float | None = None  # profiler's kernel-duration sum per call, L2 flushed
    # True: the host launched each call while the L2 flush ran, so launch time is not in
    # median_ms (all the work stayed on the timing stream); False: the launch is counted.
    launch_overlapped: bool | None = None
    # The samples' lower decile: what a host-bound call takes while the host is not slowed by
    # anything else (the speedup of an evaluation timed in rounds divides these, Result.timing_rounds).
    fast_ms: float | None = None
    # The 5th to the 20th percentile's span: how steady the samples are around the lower decile
    # (baseline_spread: a baseline timed in rounds is unstable when this is wide).
    fast_spread_ms: float | None = None

    @classmethod
    def from_samples(cls, samples_ms: list[float], device_ms: float | None = None,
                     launch_overlapped: bool | None = None) -> TimingStats:
        import statistics

        ordered = sorted(samples_ms)
        if len(ordered) >= 4:
            quartiles = statistics.quantiles(ordered, n=4)
            iqr = quartiles[2] - quartiles[0]
        else:
            iqr = ordered[-1] - ordered[0]
        if len(ordered) >= 2:
            twentieths = statistics.quantiles(ordered, n=20, method="inclusive")
            fast, fast_spread = statistics.quantiles(ordered, n=10, method="inclusive")[0], twentieths[3] - twentieths[0]
        else:
            fast, fast_spread = ordered[0], 0.0
        return cls(statistics.median(ordered), iqr, len(ordered), device_ms, launch_overlapped, fast, fast_spread)


@dataclass
class Result:
    problem: str
    candidate: str
    status: str = "crashed"
    passed: bool = False
    correct: bool = False
    violations: list[Violation] = field(default_factory=list)
    warnings: list[Violation] = field(default_factory=list)  # static-only findings
    trials: list[TrialResult] = field(default_factory=list)
    timing: dict[str, TimingStats] = field(default_factory=dict)  # candidate, eager, compile, ...
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    reward: float = -1.0
    error: str | None = None  # the first line a person needs when it did not pass
    log: str = ""  # tail of the child's stdout/stderr, for build errors and crashes
    kernels: list[str] = field(default_factory=list)  # GPU kernels seen in the profiled calls
    precision: list[str] = field(default_factory=list)  # lower-precision signs seen (tf32, fp16)
    # {"configured": the run's preset, "candidate": in force when the candidate was timed, which
    # the baselines were timed under too}: knob name -> value (backend_settings.py).
    backend_settings: dict[str, dict] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)  # build, correctness, timing...
    # Finer than phase_seconds, summed over calls: "reference.<request>" and "candidate.<request>"
    # (waiting on each kind of worker request, its transfer included), "<side>.<request>.<step>"
    # (the worker's own steps inside it, where it says them: prepare, draw_set, fresh_sets,
    # forward), "compare" (the parent's output comparisons), "parent.lend" (copying each call's
    # inputs into memory lent to the candidate). experiments/phase_profile.py tabulates it.
    profile: dict[str, float] = field(default_factory=dict)
    device: str = "cpu"
    convention: str = "kernelbench"  # whose "correct" the verdict follows (config.CONVENTIONS)
    # The reference's weights brought into the candidate: {"copied", "reference_entries",
    # "candidate_entries"}, and under kernelbench "differing" (entries of the reference's name
    # and shape that the same-seed construction left unlike the reference's) and "copy_needed"
    # (the candidate was right only with them copied in) (conventions.load_reference_weights).
    weights: dict[str, int] = field(default_factory=dict)
    nondeterministic_trials: list[int] = field(default_factory=list)  # trials the reference cannot repeat
    # The reference keeps state across calls (a second call on the same inputs under the same
    # seed answers otherwise: an RNN's self.hidden): the candidate's calls were compared with
    # the reference's at the same positions, its timed outputs not at all (warning stateful_reference).
    stateful_reference: bool = False
    # The candidate's timed calls as the evaluating process saw them from outside its worker
    # (outside_view.Account): wall_ms, samples_ms, unaccounted_ms, allowed_ms, new_threads_cpu_ms.
    timed_request: dict[str, float] = field(default_factory=dict)
    # Where the candidate and the eager baseline were timed in alternating rounds
    # (TimingConfig.timing_rounds, host_bound_rounds): each round's medians, samples and the
    # samples' start times, {"candidate_ms", "eager_ms", "candidate_samples_ms",
    # "eager_samples_ms", "candidate_started_ms", "eager_started_ms"}, in order.
    # speedup_vs_eager is then the ratio of the two sides' lower deciles (TimingStats.fast_ms)
    # over all rounds.
    timing_rounds: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    def summary(self) -> str:
        """One line a person reads in a terminal or a pytest report."""
        parts = [f"{self.status.upper()}", f"reward={self.reward:g}"]
        if self.trials:
            good = sum(trial.correct for trial in self.trials)
            parts.append(f"trials {good}/{len(self.trials)}")
        candidate = self.timing.get("candidate")
        if candidate:
            parts.append(f"candidate {candidate.median_ms:.4g} ms")
        if self.speedup_vs_eager is not None:
            parts.append(f"{self.speedup_vs_eager:.2f}x vs eager")
        if self.speedup_vs_compile is not None:
            parts.append(f"{self.speedup_vs_compile:.2f}x vs compile")
        for violation in self.violations:
            parts.append(f"[{violation.rule}] {violation.detail}")
        if self.error and not self.violations:
            parts.append(self.error)
        return " | ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        data = dict(data)
        data["violations"] = [Violation(**item) for item in data.get("violations", [])]
        data["warnings"] = [Violation(**item) for item in data.get("warnings", [])]
        data["trials"] = [TrialResult(**item) for item in data.get("trials", [])]
        data["timing"] = {name: TimingStats(**stats) for name, stats in data.get("timing", {}).items()}
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    @classmethod
    def from_json(cls, text: str) -> Result:
        return cls.from_dict(json.loads(text))
