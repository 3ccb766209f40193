"""Every number that decides a verdict, a time or a reward, in one place with its reason."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path


def default_cache_dir() -> Path:
    return Path(os.environ.get("CUDAAGENT_CACHE", Path.home() / ".cache" / "cudaagent"))


@dataclass
class Tolerance:
    atol: float
    rtol: float


# KernelBench and the paper both check fp32 at atol=rtol=1e-2; half types need looser bounds
# because their own rounding step is ~1e-3 (fp16) and ~8e-3 (bf16).
DEFAULT_TOLERANCES = {
    "float64": Tolerance(1e-2, 1e-2),
    "float32": Tolerance(1e-2, 1e-2),
    "float16": Tolerance(1e-2, 1e-2),
    "bfloat16": Tolerance(2e-2, 2e-2),
}
# `--tolerance strict`: what honest fp32 arithmetic reaches (reordered sums stay far below 1e-4).
STRICT_TOLERANCES = {
    "float64": Tolerance(1e-7, 1e-7),
    "float32": Tolerance(1e-4, 1e-4),
    "float16": Tolerance(1e-3, 1e-3),
    "bfloat16": Tolerance(8e-3, 8e-3),
}


# A precompiled torch/extension.h takes about as long as one cold C++ build (fast_build.py); past
# this the candidate builds the plain way instead of waiting.
PCH_BUILD_TIMEOUT_S = 600.0


@dataclass
class TimingConfig:
    # Time-based budgets (as triton.testing.do_bench): a fixed call count under-samples
    # microsecond kernels and over-samples 100 ms ones.
    warmup_ms: float = 25.0
    repeat_ms: float = 100.0
    min_samples: int = 10
    max_samples: int = 1000
    # Several fresh input sets, rotated call by call, so memoising by pointer or by call count
    # shows up as wrong outputs, and a small input cannot live in L2 across calls.
    rotating_inputs: int = 3
    # Bytes written between timed calls to evict L2 (H100: 50 MB; 256 MB covers any current part).
    l2_flush_bytes: int = 256 * 1024 * 1024
    # Audit every timed call too. Off by default: the dispatch audit adds ~25 us per call on an
    # H100, which would bias every speedup; the audited check round, the checked outputs and the
    # timing_inconsistent rule cover the timed calls instead (README, "Why timed calls run bare").
    audit_timed_calls: bool = False
    # Record the start event behind the L2 flush, without waiting for it, as triton's do_bench
    # does: the host launches the call while the flush runs, so the host's launch time (14-38 us
    # for one kernel, varying from process to process on an H100) stays out of the time. Work on
    # other streams is still counted (device-wide synchronisation before the end event), except
    # what a non-blocking stream runs during the flush; the timing_inconsistent rule compares
    # with the profiled span. False: synchronise before the start event (launch time counted).
    overlap_launch: bool = True
    # With the launch overlapped, a call ends where its work on the timing stream ends, unless
    # the device-wide synchronisation came back later than this after it (the host's wake-up
    # takes ~11 us on an H100): then the synchronised end is the call's end.
    sync_latency_ms: float = 0.05
    # Also report the profiler's kernel-duration sum (device time); it costs one extra pass.
    device_time: bool = True
    device_time_calls: int = 10
    device_time_warmup_ms: float = 20.0  # calls before the profiled ones, so clocks are up


@dataclass
class RewardConfig:
    # The paper's milestones: -1 fails, 1 correct, 2 faster than eager, 3 faster than compile.
    eager_speedup: float = 1.05
    compile_speedup: float = 1.05


@dataclass
class EvalConfig:
    device: str = "auto"  # "cuda", "cpu" or "auto" (cuda when a GPU is visible)
    trials: int = 5  # the paper's five fresh-input correctness checks
    tolerance: str = "default"  # "default" or "strict" (tables above)
    timing: bool = True
    baselines: tuple[str, ...] = ("eager", "compile")  # any of eager, compile, max-autotune
    timing_config: TimingConfig = field(default_factory=TimingConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    # Wall-clock limits per child process. Builds get their own: a cold CUDA load_inline takes
    # 30-36 s on the H100 machine and several candidates may build at once.
    build_timeout_s: float = 600.0
    # Build candidates through fast_build.py's shared precompiled header and own-GPU-only arch
    # (README, "Builds"); off: torch's plain load_inline/load (build locks are taken either way).
    fast_build: bool = True
    run_timeout_s: float = 300.0
    memory_cap_gb: float = 32.0  # host RSS of one child; the parent kills it beyond this
    policy: str = "strict"  # anti-hacking policy preset: "strict" (the paper) or "permissive"
    # Speedups above this are flagged for review and earn no top reward until confirmed.
    plausible_speedup: float = 50.0
    cache_dir: Path = field(default_factory=default_cache_dir)

    def tolerances(self) -> dict[str, Tolerance]:
        if self.tolerance == "strict":
            return STRICT_TOLERANCES
        if self.tolerance == "default":
            return DEFAULT_TOLERANCES
        raise ValueError(f"unknown tolerance preset {self.tolerance!r}; use 'default' or 'strict'")

    def resolved_device(self) -> str:
        return resolve_device(self.device)

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["cache_dir"] = str(self.cache_dir)
        data["baselines"] = list(self.baselines)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> EvalConfig:
        data = dict(data)
        data["timing_config"] = TimingConfig(**data.get("timing_config", {}))
        data["reward"] = RewardConfig(**data.get("reward", {}))
        data["baselines"] = tuple(data.get("baselines", ()))
        data["cache_dir"] = Path(data.get("cache_dir", default_cache_dir()))
        return cls(**data)


def resolve_device(device: str) -> str:
    """`device` as given, or for "auto" cuda when a GPU is visible, else cpu."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
