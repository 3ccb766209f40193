"""Every number that decides a verdict, a time or a reward, in one place with its reason."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

# The baselines a candidate can be timed against (verify --baselines, bench, `cudaagent baselines`).
BASELINE_MODES = ("eager", "compile", "max-autotune")


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
# KernelBench's main branch (get_tolerance_for_precision, after torchbench): fp32 at 1e-4, the
# half types at 1e-2; its v0.1 release, which published results used, is DEFAULT_TOLERANCES.
KERNELBENCH_MAIN_TOLERANCES = {
    "float64": Tolerance(1e-4, 1e-4),
    "float32": Tolerance(1e-4, 1e-4),
    "float16": Tolerance(1e-2, 1e-2),
    "bfloat16": Tolerance(1e-2, 1e-2),
}
# `--tolerance strict`: what honest fp32 arithmetic reaches (reordered sums stay far below 1e-4).
STRICT_TOLERANCES = {
    "float64": Tolerance(1e-7, 1e-7),
    "float32": Tolerance(1e-4, 1e-4),
    "float16": Tolerance(1e-3, 1e-3),
    "bfloat16": Tolerance(8e-3, 8e-3),
}
TOLERANCE_PRESETS = {
    "default": DEFAULT_TOLERANCES,  # KernelBench v0.1 and the paper
    "kernelbench-main": KERNELBENCH_MAIN_TOLERANCES,
    "strict": STRICT_TOLERANCES,
}
# Whose idea of "correct" a verdict follows (README, "Conventions"): KernelBench's eval, or the
# CUDA-Agent paper's workspace (utils/verification.py).
CONVENTIONS = ("kernelbench", "cuda-agent")
# Process-wide backend settings the candidate and the baselines are timed under (README,
# "Backend settings"). pytorch-default: whatever a fresh process has, what a user's eager run and
# KernelBench's eval use (cuDNN TF32 on, matmul TF32 off on current torch); captured in each
# worker, never hard-coded. strict-fp32: TF32 off everywhere, the highest matmul precision.
BACKEND_PRESETS = ("pytorch-default", "strict-fp32")
BACKEND_HELP = ("backend settings the candidate and the baselines are timed under: pytorch-default (PyTorch's "
                "own, as a user's eager run and KernelBench use) or strict-fp32 (TF32 off everywhere)")


# What an evaluation does about device memory shared with other evaluations (README, "Device
# memory under load"): admit by footprint and retry alone, or only retry alone.
MEMORY_POLICIES = ("admit", "retry")
MEMORY_POLICY_HELP = ("device memory shared with other evaluations: admit (start a pair only when free memory less what "
                      "running pairs reserved covers its footprint) or retry (no admission); both retry an evaluation "
                      "that ran out of memory while sharing with the device to itself")


def default_memory_cap_gb() -> float:
    from ..system.host_memory import default_cap_gb

    return default_cap_gb()


# A precompiled torch/extension.h takes about as long as one cold C++ build (fast_build.py); past
# this the candidate builds the plain way instead of waiting.
PCH_BUILD_TIMEOUT_S = 600.0
# The least time a step of the reference's gets, whatever --timeout says (EvalConfig.reference_timeout_s).
REFERENCE_TIMEOUT_FLOOR_S = 120.0
# A candidate's build runs this many nice levels below the rest of its worker (fast_build.niced):
# its compilers give way to the timed calls of other evaluations on the same machine, whose
# launches a saturated CPU otherwise delays into their times.
BUILD_NICENESS = 10


@dataclass
class TimingConfig:
    # Time-based budgets (as triton.testing.do_bench): a fixed call count under-samples
    # microsecond kernels and over-samples 100 ms ones.
    warmup_ms: float = 25.0
    repeat_ms: float = 100.0
    # A host-bound call (its wall time at least host_bound_ratio times its kernels' device time:
    # a launch per small operator) is timed over host_bound_repeat_ms instead. On the H100's
    # virtual machine the host's speed for such calls switches between two levels every second
    # or so, whatever core the process is pinned to (VanillaRNNHidden's bare call 15-17 ms in
    # one stretch, 22-25 ms in the next, in one process: experiments/host_speed.py); ten calls
    # of 20 ms fall in one stretch, and a candidate and its baseline timed seconds apart then
    # differed by 1.5x (#40). About a second per side, as KernelBench's 100 trials of such a
    # model take. None: the same budget for every call.
    host_bound_ratio: float | None = 1.5
    host_bound_repeat_ms: float = 1000.0
    min_samples: int = 10
    # At least this many timed calls a side for a host-bound call, where the fresh sets fit: a
    # speedup in rounds divides lower deciles, and of a second's worth of a 72 ms call (eleven
    # calls) the lower decile is one call (level 3's LSTMBidirectional read 0.846 batched on the
    # H100, tenth session). Three calls a round at ten rounds.
    host_bound_min_samples: int = 30
    max_samples: int = 1000
    # The candidate's timed calls and the eager baseline's in this many alternating rounds
    # (candidate, eager, candidate, eager, ...), the speedups then the ratio of lower deciles
    # (TimingStats.fast_ms; Evaluation._paired_rounds says why), the eager baseline measured for
    # this evaluation alone (not read from the baseline cache, not written to it). Timed one
    # after the other, seconds apart, both sides' medians move with the host in between: on the
    # H100 machine a launch-bound call's host speed switches between two levels within a
    # fraction of a second (docs/timing.md, "Host-bound calls"). 1: the candidate, then the
    # baselines.
    timing_rounds: int = 1
    # Rounds for a host-bound call (host_bound_ratio; on the GPU, where the device time is
    # known): what they and each estimator read on level 3's identity candidates is in
    # docs/timing.md, "Candidate and eager in rounds", and docs/measured.md.
    host_bound_rounds: int = 10
    # Input buffers the calls rotate through, so a small input cannot live in L2 across calls.
    # Baselines rotate this many content sets; a candidate's timed calls each get content never
    # seen before (memoising by pointer, call count or content then gives wrong outputs), and its
    # warm-up and audited check round use this many sets each.
    rotating_inputs: int = 3
    # Host memory the fresh input sets (and the reference's outputs for them) of one timing may
    # take; past it fewer timed calls are made (never fewer than min_samples).
    fresh_inputs_bytes: int = 1 << 30
    # Bytes written between timed calls to evict L2 (H100: 50 MB; 256 MB covers any current part).
    l2_flush_bytes: int = 256 * 1024 * 1024
    # The CPU backend's cache flush before each timed call (bytes written; 0: none). No flush by
    # default: after a 32 MiB flush a sub-0.1 ms call's median was decided by where its process's
    # memory lay (a 64x64 add: 2.8-6.7 us over eight fresh processes, unflushed 1.34-1.40), and the
    # bundled and test problems' identity candidates timed within 0.9-1.1x of eager in 24-32 of 53
    # (39 unflushed; 40-49 with eager timed by the candidate's loop too, #40). Unflushed, the
    # candidate's calls and the eager baseline's find the caches alike (both loops load each set
    # right before its call), and content never seen before still keeps a memoised result out.
    cpu_flush_bytes: int = 0
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
    # A timing holds the device against other workers' untimed work (trials, reference outputs)
    # of this run; it waits this long for such work to end, then times beside it and warns
    # (`timed_beside_other_work`): a stuck trial must not hold every timing for its timeout.
    quiet_wait_s: float = 30.0
    # Logical CPUs (rounded up to whole cores) kept for the process holding a device's timing
    # lock; every other process of the run stays off them (host_quiet.py). A launch-bound call
    # waited for a core in a full batch: an exact F.conv_transpose1d forward timed 0.14x of eager
    # beside fifteen workers' builds and checks, 1.01x alone (H100). None: the machine's own
    # (host_quiet.automatic_count: 2 from eight cores on, 1 from four, none below); 0: none.
    reserved_cpus: int | None = None
    # Also report the profiler's kernel-duration sum (device time); it costs one extra pass.
    device_time: bool = True
    # Detach CUPTI when that pass ends (Kineto's TEARDOWN_CUPTI=1, set in every worker): Kineto
    # leaves it attached by default, and every later launch of the process, the timed calls that
    # follow the pass included, pays for its callbacks (pytorch/pytorch#144455: 10-20% of a
    # training step). KernelBench's timing runs no profiler. False: Kineto's default.
    cupti_teardown: bool = True
    device_time_calls: int = 10
    device_time_warmup_ms: float = 20.0  # calls before the profiled ones, so clocks are up
    # timing_inconsistent (GPU): bare calls cannot finish before the kernels they launch are done,
    # so a bare median below this fraction of the profiled calls' busy time (the union of their
    # kernel intervals) means another code path ran unwatched. The margin covers what moves
    # between the two: device time spread 0.3-0.6% and clock boost (README, "Measured").
    inconsistent_busy_fraction: float = 0.8
    # timing_inconsistent (CPU, no profiler): bare calls below this fraction of the watched
    # calls' time, less a bound on what the watch itself costs, would mean another code path ran
    # unwatched. Off by default (None): on the shared 2-core CI machine the watched calls' time
    # swings too much to judge by. Honest glue measured 0.0056-0.43 of its watched work (a tiny
    # matmul: 0.11 ms bare against one 20 ms watched outlier; 36 small operators; a small CNN)
    # while a PyTorch fallback taken only when unwatched measured 0.0014: no bound separates
    # them safely. On the CPU the defence is fresh content and checked outputs on every timed
    # call; the GPU's busy-time bound catches a fallback taken only when unwatched. Set it
    # (0.01 was the tightest tried) on a quiet machine.
    cpu_inconsistent_fraction: float | None = None
    cpu_audit_ms_per_op: float = 0.15
    cpu_audit_ms_per_call: float = 0.005
    # timing_unaccounted (outside_view.py): the candidate's timed request, seen from the
    # evaluating process (the worker's CPU time on the CPU, its own clock on the GPU), may exceed
    # the samples it reported by this many times what the same loop costs around its calls on the
    # reference's worker (measured over loop_cost_calls calls of a call that does nothing), plus
    # the slack. On the 2-core CI box under load honest candidates used at most 1.0 times it; a
    # clock slowed 20 times on a 32 ms call hides 30 ms a call, the CPU loop costs a few ms a
    # call. None turns the check off.
    unaccounted_factor: float | None = 3.0
    # A timed request over that allowance is timed again on fresh sets (up to this many
    # requests in all) before it is a violation: work of other processes on the device can
    # stall the loop around the calls; a changed clock trips every attempt.
    unaccounted_attempts: int = 3
    unaccounted_slack_ms: float = 20.0
    loop_cost_calls: int = 16
    # Python's cyclic collector run before timed work and paused until its reply has gone (as
    # timeit does; timing/gc_pause.py): the candidate's timed request, the calibration loop and
    # the baselines' samples. A full collection in the candidate's worker (torch and
    # torch._dynamo imported) is tens of milliseconds outside any sample.
    pause_gc: bool = True
    # background_thread (outside_view.py): a thread or process the candidate's code started may
    # use this much CPU beyond the timed calls' own duration while they run, and this much per
    # call (an OpenMP worker spinning a while after a parallel region ends). Threads' CPU times
    # are read in nanoseconds; one that ended meanwhile is known only in clock ticks, and gets
    # two ticks more.
    new_thread_slack_ms: float = 5.0
    new_thread_slack_per_call_ms: float = 0.5
    # And while the worker waits for its next request, this long after the last timed call (no
    # call runs then: an idle thread uses nothing, a spinning OpenMP worker well under the slack),
    # any of those threads may use at most this much CPU. Under heavy load a thread that works
    # between calls gets no more CPU than the preempted calls last; it still works here.
    idle_watch_ms: float = 20.0
    idle_thread_slack_ms: float = 2.0
    # A timed call's output outside tolerance but within this factor of it, in at most this
    # fraction of its elements, is a numerical difference (reported), not proof of skipped work.
    numerical_tolerance_factor: float = 10.0
    numerical_max_fraction: float = 1e-3
    # unstable_baseline: a baseline whose IQR exceeds this fraction of its median is measured
    # again, up to baseline_remeasures more times; the steadiest measurement is kept, and if even
    # it is wider the Result says so. Honest spreads on the H100 are far below: the fp32 GEMM's
    # IQR was 0.06 ms on 1.42 ms (4%; README, "Measured"), launch-bound kernels' medians moved
    # 6-8% between processes before the launch was overlapped. The KernelBench comparison (issue
    # 22) met an eager baseline with IQR 1.78 ms on a 1.67 ms median (107%) that tripled a
    # speedup. At 0.2 the median can sit anywhere in a middle half of the samples ~20% wide, so
    # a speedup divided by it moves at most about as much as the 0.8-1.25x band that comparison
    # accepts.
    unstable_spread: float = 0.2
    # The CPU backend's bound, None: not judged. On the shared 2-core CI machine tiny CPU
    # baselines (12-20 us) kept IQRs of 128-137% of their medians after re-measuring, so every
    # row of a CPU bench was flagged; CPU speedups there are a functional check, not a measure.
    cpu_unstable_spread: float | None = None
    baseline_remeasures: int = 2


# What the sandboxed candidate may read and execute (besides Python's prefixes, site-packages, this
# package, CUDA_HOME and its own sources): the system's programs, libraries, headers and settings,
# and /proc and /sys (a private /proc, read only). Home, /tmp, the repository and the cache are not
# here: a candidate must not read the problem file, other candidates or the baseline cache.
SANDBOX_READ_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys")


@dataclass
class SandboxLimits:
    # Per process; the wall-clock deadlines above bound an evaluation, this bounds a process that
    # spins in the background. A cold CUDA build is ~40 s of CPU per compiler process.
    cpu_seconds: int = 1800
    # The largest file it may write: a CUDA extension's .so is tens of MB; a disk filler stops here.
    file_size_mb: int = 2048
    open_files: int = 4096
    # Processes and threads together (cgroup pids.max): a build runs a few dozen, torch one thread
    # per core; a fork bomb stops here.
    processes: int = 1024
    # The cgroup's memory limit, as a multiple of memory_cap_gb: the parent's RSS watch at the cap
    # gives the clear verdict; the cgroup is the backstop for growth faster than the watch polls.
    memory_headroom: float = 1.5


@dataclass
class RewardConfig:
    # The paper's milestones: -1 fails, 1 correct, 2 faster than eager, 3 faster than compile.
    eager_speedup: float = 1.05
    compile_speedup: float = 1.05


@dataclass
class EvalConfig:
    device: str = "auto"  # "cuda", "cpu" or "auto" (cuda when a GPU is visible)
    trials: int = 5  # the paper's five fresh-input correctness checks
    tolerance: str = "default"  # a TOLERANCE_PRESETS name: default, kernelbench-main, strict
    convention: str = "kernelbench"  # a CONVENTIONS name: how models are built, run and loaded
    timing: bool = True
    baselines: tuple[str, ...] = ("eager", "compile")  # any of eager, compile, max-autotune
    timing_config: TimingConfig = field(default_factory=TimingConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    # Wall-clock limits per child process. Builds get their own: a cold CUDA load_inline takes
    # 30-36 s on the H100 machine and several candidates may build at once.
    build_timeout_s: float = 600.0
    # Build candidates through fast_build.py's shared precompiled torch/extension.h (README,
    # "Builds"). Off by default until it pays: on the 2-core CPU box it halved a file that
    # includes torch/extension.h but was a wash for the bundled candidates (torch/types.h only),
    # nvcc cannot use it, and each flag set costs a 790 MB header built once. Build locks that
    # die with their owner (and the stale torch lock cleared) apply either way.
    fast_build: bool = False
    # Run nvcc's host and device front ends side by side (split_nvcc.py): the same commands and
    # object, its output and exit status replayed in nvcc's order; the real nvcc for any plan it
    # does not recognise. False: torch's nvcc as it is.
    split_nvcc: bool = True
    # Compile a CUDA source that includes torch/extension.h (torch/torch.h, torch/all.h) with
    # torch/types.h in its place first, as written if that fails (header_diet.py says when it
    # is not tried and why the result means the same): nvcc then parses about a third of the
    # headers. False: every source as written.
    header_diet: bool = True
    # Before that copy, one on ATen's Tensor, the dispatch macros and the operators the source
    # names (header_diet.py's lean copy: about half of torch/types.h's compile). False: only the
    # copy on torch/types.h.
    header_diet_lean: bool = True
    run_timeout_s: float = 300.0
    # Candidates evaluated in one process with this same id share each problem's reference: its
    # construction seed, weights and correctness inputs are drawn once, for the first of them
    # (reference_batch.py; the timed calls' inputs stay fresh per candidate). Give an id only to
    # candidates written before any of them is evaluated: one written after reading another's
    # Result could know the trial inputs. "": every evaluation draws its own.
    reference_batch: str = ""
    # Host RSS of one child; the parent kills it beyond this. Derived from the machine: half its
    # memory (its RAM, or its cgroup's limit if lower), at most 32 GiB (host_memory.default_cap_gb):
    # a fixed 32 GiB was more than the 24 GiB CI machine has.
    memory_cap_gb: float = field(default_factory=default_memory_cap_gb)
    # What an evaluation does about the device's memory that others share (memory_gate.py):
    # "admit" starts a pair only when the free memory, less what running pairs reserved, covers
    # its footprint (known from its problem's earlier runs), and retries one that still ran out of
    # memory with the device to itself; "retry" only retries.
    memory_policy: str = "admit"
    policy: str = "strict"  # anti-hacking policy preset: "strict" (the paper) or "permissive"
    backend: str = "pytorch-default"  # a BACKEND_PRESETS name: settings everything is timed under
    # Speedups above this are flagged for review and earn no top reward until confirmed.
    plausible_speedup: float = 50.0
    cache_dir: Path = field(default_factory=default_cache_dir)
    # Confine the candidate's process (sandbox.py); False only to measure what it costs.
    sandbox: bool = True
    require_sandbox: bool = False  # refuse to evaluate where a piece of the sandbox is missing
    sandbox_limits: SandboxLimits = field(default_factory=SandboxLimits)

    def __post_init__(self) -> None:
        if self.tolerance not in TOLERANCE_PRESETS:
            raise ValueError(f"unknown tolerance preset {self.tolerance!r}; use one of {sorted(TOLERANCE_PRESETS)}")
        if self.convention not in CONVENTIONS:
            raise ValueError(f"unknown convention {self.convention!r}; use one of {list(CONVENTIONS)}")
        if self.backend not in BACKEND_PRESETS:
            raise ValueError(f"unknown backend preset {self.backend!r}; use one of {list(BACKEND_PRESETS)}")
        if self.memory_policy not in MEMORY_POLICIES:
            raise ValueError(f"unknown memory policy {self.memory_policy!r}; use one of {list(MEMORY_POLICIES)}")

    @property
    def reference_timeout_s(self) -> float:
        """Seconds each of the reference's steps may take: run_timeout_s, at least
        REFERENCE_TIMEOUT_FLOOR_S. `--timeout` is for the candidate; the reference's start
        (a process importing torch, the model built, the sets drawn) beside a candidate looping
        on one core and a neighbour's compilers on the other took over 15 s on the 2-core CI
        machine, and `--timeout 15` then made a problem_error of a candidate's timeout."""
        return max(self.run_timeout_s, REFERENCE_TIMEOUT_FLOOR_S)

    def tolerances(self) -> dict[str, Tolerance]:
        return TOLERANCE_PRESETS[self.tolerance]

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
        data["sandbox_limits"] = SandboxLimits(**data.get("sandbox_limits", {}))
        data["baselines"] = tuple(data.get("baselines", ()))
        data["cache_dir"] = Path(data.get("cache_dir", default_cache_dir()))
        return cls(**data)


def resolve_device(device: str) -> str:
    """`device` as given, or for "auto" cuda when a GPU is visible, else cpu."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# `--timeout` and `--build-timeout` (EvalConfig.run_timeout_s, build_timeout_s; options.py checks
# their values): one wording for verify, bench and the plugin.
RUN_TIMEOUT_HELP = (f"seconds one step of the candidate's may take (constructing it, each correctness trial, the "
                    f"timed calls) before it is `timeout` (default {EvalConfig.run_timeout_s:g}); the reference's "
                    f"steps get at least {REFERENCE_TIMEOUT_FLOOR_S:g} s")
BUILD_TIMEOUT_HELP = (f"seconds a candidate's build (its import, load_inline's compile) may take before it is "
                      f"`timeout` (default {EvalConfig.build_timeout_s:g})")

