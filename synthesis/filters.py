"""The paper's task filters, as plain functions over one problem's source: runs in eager mode,
deterministic, not degenerate, a workload inside the runtime window (scaling the batch to get
there), and runs under torch.compile with matching outputs. `check_task` runs them in order,
cheapest first, and stops at the first failure; torch.compile runs last, only on survivors.
Each stage's seconds, and the seconds spent waiting for the device lock, go into the outcome.

Runs inside a filter worker (filter_worker.py), never in the pipeline's own process: the source
is generated code.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pytest_cudaagent.core.compare import as_output_list, compare_outputs
from pytest_cudaagent.core.config import DEFAULT_TOLERANCES, TimingConfig, Tolerance
from pytest_cudaagent.core.files import import_file
from pytest_cudaagent.timing.locks import device_lock, device_work
from pytest_cudaagent.timing.timer import Clock, Timer

from .render import BATCH_VARIABLE

# Every reason a task can be dropped for, as the manifest names it.
REASONS = (
    "bad_format", "stochastic_operator", "contaminated_kernelbench", "duplicate", "eager_error",
    "bad_output", "nan_or_inf", "nondeterministic", "constant_output", "nearly_constant_output",
    "input_independent", "workload_too_fast", "workload_too_slow", "compile_error",
    "compile_mismatch", "out_of_memory", "timeout", "crashed",
)


def _fast_timing() -> TimingConfig:
    # A filter needs to know whether a task lands in a window a hundredfold wide, not its time to
    # a percent: short budgets (every worker waits while one times), no profiler pass, and one
    # input set: the task's own model cannot memoise, and a second set would double the memory.
    return TimingConfig(warmup_ms=5.0, repeat_ms=20.0, min_samples=5, max_samples=100,
                        rotating_inputs=1, device_time=False)


@dataclass
class FilterConfig:
    device: str = "cuda"
    min_ms: float = 1.0  # the paper's workload window for eager runtime
    max_ms: float = 100.0
    compile: bool = True  # the torch.compile filter (the costly one; off only in quick tests)
    input_sets: int = 3  # distinct inputs at the starting batch, for the dependence check
    # The evaluator's tolerances decide what a cheat could pass with: an output that a constant,
    # or another input's output, matches on this share of elements is degenerate.
    degenerate_fraction: float = 0.99
    # Two runs on one input may differ by reduction order (atomics), never by a random draw.
    determinism_tolerance: float = 1e-4
    max_scale_steps: int = 8
    max_batch: int = 1 << 24  # a sanity bound; the memory ceiling below is what binds
    # Memory one forward may need at the scaled batch: inputs, intermediates and outputs. A worker
    # holds up to ~1.5 times that while it times eager (plus a copy of the inputs), and about half
    # of it while it compiles (the inputs and the eager outputs kept for the comparison), which is
    # most of a task's time; 14 workers share one 80 GB H100 with ~1 GB of context and timer
    # buffers each. Tasks that cannot reach the window inside it (one or two memory-bound
    # kernels) are dropped as too fast: by a roofline estimate over composed tasks, about 38%
    # at 3 GiB, 53% at 2 GiB.
    max_task_bytes: int = 3 << 30
    timing: TimingConfig = field(default_factory=_fast_timing)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> FilterConfig:
        data = dict(data)
        data["timing"] = TimingConfig(**data.get("timing", {}))
        return cls(**data)

    @property
    def target_ms(self) -> float:
        # Aim low in the window: every timed filter call (under the device lock, while the other
        # workers wait) and every later evaluation of the kept task pays for the runtime, and a
        # bigger batch needs more memory on a GPU that the workers share.
        return min(math.sqrt(self.min_ms * self.max_ms), 2 * self.min_ms)

    @property
    def accepted_estimate_ms(self) -> tuple[float, float]:
        """Quick estimates the batch search stops at: far enough above the floor that the final
        measurement's noise keeps the task in the window, and within a few times the target, so
        a batch that overshot is scaled back down."""
        return min(1.25 * self.min_ms, self.target_ms), min(self.max_ms, 4 * self.target_ms)


@dataclass
class FilterOutcome:
    kept: bool = False
    reasons: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)  # reason -> what was seen
    checks: dict[str, str] = field(default_factory=dict)  # filter -> "pass" or "fail"
    eager_ms: float | None = None
    compile_ms: float | None = None
    batch_size: int | None = None  # after workload scaling
    output_shapes: list[list[int]] = field(default_factory=list)
    source: str = ""  # the source as kept (its batch size scaled)
    filter_seconds: dict[str, float] = field(default_factory=dict)  # stage -> seconds, in the worker
    lock_wait_seconds: float = 0.0  # of those, waiting for the device lock (workload and compile)

    def fail(self, reason: str, detail: str = "") -> FilterOutcome:
        self.reasons.append(reason)
        self.details[reason] = detail[:500]
        self.kept = False
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> FilterOutcome:
        return cls(**data)


class FilterFailed(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# -- the batch knob ------------------------------------------------------------------------------


def batch_size_of(source: str) -> int | None:
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == BATCH_VARIABLE
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)):
            return node.value.value
    return None


def with_batch_size(source: str, batch: int) -> str:
    """The source with its module-level `batch_size = N` set to `batch`."""
    lines = source.splitlines(keepends=True)
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == BATCH_VARIABLE):
            lines[node.lineno - 1] = f"{BATCH_VARIABLE} = {batch}\n"
            return "".join(lines)
    raise ValueError(f"the source has no module-level `{BATCH_VARIABLE} = N` to scale")


# -- running the task ----------------------------------------------------------------------------


class LoadedTask:
    """A task imported from its source, its model built and its input sets drawn.

    The first load builds on the host and moves to the device, as the evaluator's reference
    does. Loads at a scaled batch build on the device directly (`on_device`) and draw one input
    set: on the host, torch.randn takes ~16 ns per element on one core, so a gigabyte of inputs
    took seconds per set, and every worker held that much host memory while it did."""

    _counter = 0

    def __init__(self, source: str, config: FilterConfig, workdir: Path, input_sets: int | None = None,
                 on_device: bool = False):
        LoadedTask._counter += 1
        path = workdir / f"task_{LoadedTask._counter}.py"
        path.write_text(source)
        self.module = import_file(path, f"cudaagent_synth_task_{LoadedTask._counter}")
        self.device = config.device
        self.input_sets = []
        with torch.device(self.device) if on_device else contextlib.nullcontext():
            torch.manual_seed(0)
            self.model = self.module.Model(*self.module.get_init_inputs()).to(self.device).eval()
            for index in range(config.input_sets if input_sets is None else input_sets):
                torch.manual_seed(1000 + index)
                self.input_sets.append(
                    [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in self.module.get_inputs()]
                )

    def run(self, fn, index: int) -> list:
        with torch.no_grad():
            return as_output_list(fn(*self.input_sets[index]))


def _nbytes(values: list) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _kept(outputs: list) -> list:
    # Copies on the device: the checks on them run there, without a trip through the host (a
    # model may return a buffer that its next call overwrites, hence copies).
    return [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outputs]


class StageClock:
    """Seconds per filter stage and seconds spent waiting for the device lock, into the outcome;
    and each stage's start, with what it is doing, to `on_stage(stage, detail)`, so a task that
    never finishes (killed at its timeout, or with the run) still shows where it was."""

    def __init__(self, outcome: FilterOutcome, on_stage: Callable[[str, str], None] | None = None):
        self.outcome = outcome
        self.on_stage = on_stage
        self.stage = ""
        self.started = time.perf_counter()

    def begin(self, stage: str) -> None:
        self.stage, self.started = stage, time.perf_counter()
        self.note()

    def note(self, detail: str = "") -> None:
        if self.on_stage is not None:
            self.on_stage(self.stage, detail)

    def end(self, passed: bool = True) -> None:
        seconds = self.outcome.filter_seconds
        seconds[self.stage] = seconds.get(self.stage, 0.0) + time.perf_counter() - self.started
        self.outcome.checks[self.stage] = "pass" if passed else "fail"

    def device_lock(self, device: str):
        return self._counting_the_wait(device_lock(device))

    def device_work(self, device: str):
        """Untimed work on the device, after any timing in progress (locks.device_work)."""
        return self._counting_the_wait(device_work(device))

    @contextlib.contextmanager
    def _counting_the_wait(self, hold):
        waiting = time.perf_counter()
        with hold:
            self.outcome.lock_wait_seconds += time.perf_counter() - waiting
            yield


def _matching_fraction(expected: list, actual: list, tolerances=DEFAULT_TOLERANCES) -> float:
    trial = compare_outputs(0, expected, actual, tolerances)
    if trial.error and not trial.mismatches:  # shape or type differs: nothing matches
        return 0.0
    return 1.0 - trial.mismatches / max(trial.numel, 1)


def compare_in_chunks(expected: list, actual: list, chunk: int = 1 << 24) -> str | None:
    """What differs between two output lists on one device, within the evaluator's tolerances,
    or None. Compared a slice at a time: the comparison's temporaries are several times the size
    compared, and scaled outputs can be gigabytes on a GPU that other workers share."""
    if len(expected) != len(actual) or not all(
            type(a) is torch.Tensor and a.shape == e.shape and a.dtype == e.dtype
            for e, a in zip(expected, actual, strict=True)):
        return compare_outputs(0, expected, actual, DEFAULT_TOLERANCES).error or "outputs differ"
    mismatches, numel, worst = 0, 0, 0.0
    for want, got in zip(expected, actual, strict=True):
        want, got = want.reshape(-1), got.reshape(-1)
        for start in range(0, want.numel(), chunk):
            trial = compare_outputs(0, [want[start:start + chunk]], [got[start:start + chunk]], DEFAULT_TOLERANCES)
            mismatches, worst = mismatches + trial.mismatches, max(worst, trial.max_abs_error)
        numel += want.numel()
    if mismatches:
        return f"{mismatches} of {numel} elements outside tolerance (max abs error {worst:.3g})"
    return None


def check_outputs(outputs: list) -> None:
    if not outputs or not all(type(o) is torch.Tensor for o in outputs):
        raise FilterFailed("bad_output", "forward must return a tensor or a tuple of tensors")
    if not all(o.is_floating_point() for o in outputs):
        raise FilterFailed("bad_output", "outputs must be floating point")
    if any(o.numel() == 0 for o in outputs):
        raise FilterFailed("bad_output", "an output is empty")
    if not all(bool(torch.isfinite(o).all()) for o in outputs):
        raise FilterFailed("nan_or_inf", "an output holds NaN or Inf on standard normal inputs")


def check_deterministic(task: LoadedTask, first: list, config: FilterConfig) -> None:
    torch.manual_seed(987654321)  # another RNG state: a random draw in forward shows here
    with device_work(task.device):
        again = _kept(task.run(task.model, 0))
    tolerance = Tolerance(config.determinism_tolerance, config.determinism_tolerance)
    trial = compare_outputs(0, first, again, {k: tolerance for k in DEFAULT_TOLERANCES})
    if not trial.correct:
        raise FilterFailed("nondeterministic", f"two runs on one input differ: {trial.error}")


def check_not_degenerate(outputs_per_set: list[list], config: FilterConfig) -> None:
    first = outputs_per_set[0]
    for position, output in enumerate(first):
        flat = output.flatten()
        if bool((flat == flat[0]).all()):
            raise FilterFailed("constant_output", f"output {position} is the constant {float(flat[0]):.4g}")
        # The median of a strided sample: a sort of the whole output costs seconds on big ones.
        sample = flat[:: max(1, flat.numel() // (1 << 16))].float()
        guess = torch.full_like(output, float(sample.median()))
        share = _matching_fraction([output], [guess])
        if share >= config.degenerate_fraction:
            raise FilterFailed(
                "nearly_constant_output",
                f"a constant matches {share:.1%} of output {position} within the evaluator's tolerance",
            )
    for index, other in enumerate(outputs_per_set[1:], 1):
        share = _matching_fraction(first, other)
        if share >= config.degenerate_fraction:
            raise FilterFailed(
                "input_independent",
                f"outputs for input sets 0 and {index} agree on {share:.1%} of elements",
            )


def forward_bytes(task: LoadedTask) -> int:
    """Runs the forward once and returns the memory it needed: inputs, intermediates, outputs
    (on the CPU, which keeps no allocator statistics, inputs and outputs only)."""
    input_bytes = _nbytes(task.input_sets[0])
    if task.device != "cuda":
        return input_bytes + _nbytes(task.run(task.model, 0))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    task.run(task.model, 0)
    return input_bytes + torch.cuda.max_memory_allocated() - before


def quick_estimate(task: LoadedTask, clock: Clock, stages: StageClock) -> tuple[float, int]:
    """A cheap estimate for choosing the batch (median of three calls), and the bytes one forward
    needs. The first call at a new batch (allocations, library set-up) runs outside the lock."""
    with stages.device_work(task.device):
        needed_bytes = forward_bytes(task)
    with torch.no_grad(), stages.device_lock(task.device):
        clock.synchronize()
        times = [clock.time_call_ms(lambda: task.model(*task.input_sets[0]))[0] for _ in range(3)]
    return statistics.median(times), needed_bytes


def scale_workload(source: str, task: LoadedTask, config: FilterConfig, clock: Clock, workdir: Path,
                   stages: StageClock):
    """Scale the batch until a quick estimate lands low in the window, inside the memory ceiling.
    Returns (source, task)."""
    batch = batch_size_of(source)
    low, high = config.accepted_estimate_ms
    for _ in range(config.max_scale_steps):
        estimate, needed_bytes = quick_estimate(task, clock, stages)
        stages.note(f"batch {batch}: {estimate:.3g} ms, {needed_bytes / 2**20:.0f} MiB")
        if low <= estimate <= high or batch is None:
            break
        wanted = round(batch * config.target_ms / max(estimate, 1e-4))
        ceiling = min(config.max_batch, int(config.max_task_bytes * batch / max(needed_bytes, 1)))
        new_batch = max(1, min(ceiling, wanted))
        if new_batch == batch:
            break
        source, batch = with_batch_size(source, new_batch), new_batch
        task = None  # the previous batch's memory goes before the next one is drawn
        task = LoadedTask(source, config, workdir, input_sets=1, on_device=True)
    return source, task


def measure_ms(task: LoadedTask, fn, timer: Timer, stages: StageClock) -> tuple[float, list]:
    with torch.no_grad(), stages.device_lock(task.device):
        measurement = timer.measure(fn, task.input_sets[: max(1, timer.config.rotating_inputs)])
    return statistics.median(measurement.samples_ms), measurement.final_outputs


def check_workload(eager_ms: float, config: FilterConfig, batch: int | None) -> None:
    # Without a module-level `batch_size = N` there is nothing to scale: say so, so that the
    # author of a hand-written problem knows what to add.
    fixed = f"(no module-level `{BATCH_VARIABLE} = N` to scale)"
    if eager_ms < config.min_ms:
        where = "at the largest batch tried" if batch is not None else fixed
        raise FilterFailed("workload_too_fast", f"eager {eager_ms:.3g} ms < {config.min_ms} ms {where}")
    if eager_ms > config.max_ms:
        where = "at the smallest batch tried" if batch is not None else fixed
        raise FilterFailed("workload_too_slow", f"eager {eager_ms:.3g} ms > {config.max_ms} ms {where}")


def check_compile(task: LoadedTask, expected: list, timer: Timer, stages: StageClock) -> float:
    """Compile for the one shape it will see, compare with eager's outputs on input set 0 (on the
    device), time. Returns compile_ms."""
    import torch._dynamo

    try:
        try:
            compiled = torch.compile(task.model, dynamic=False)
            actual = task.run(compiled, 0)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:
            raise FilterFailed("compile_error", f"{type(error).__name__}: {str(error)[:400]}") from None
        mismatch = compare_in_chunks(expected, actual)
        del actual
        if mismatch:
            raise FilterFailed("compile_mismatch", mismatch)
        stages.note("timing")
        try:
            compile_ms, _ = measure_ms(task, compiled, timer, stages)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:
            raise FilterFailed("compile_error", f"while timing: {type(error).__name__}: {str(error)[:400]}") from None
    finally:
        torch._dynamo.reset()  # this worker compiles thousands of models: drop their caches
    return compile_ms


def check_task(source: str, config: FilterConfig, clock: Clock | None = None,
               timer: Timer | None = None, workdir: Path | None = None,
               on_stage: Callable[[str, str], None] | None = None) -> FilterOutcome:
    """Every runtime filter, cheapest first; the first failure ends the check. `on_stage(stage,
    detail)` hears each stage start and progress note."""
    clock = clock or Clock(config.device)
    timer = timer or Timer(clock, config.timing)
    outcome = FilterOutcome(source=source, batch_size=batch_size_of(source))
    stages = StageClock(outcome, on_stage)
    temporary = None
    if workdir is None:
        temporary = tempfile.TemporaryDirectory(prefix="cudaagent-synth-")
        workdir = Path(temporary.name)
    try:
        stages.begin("eager")
        try:
            task = LoadedTask(source, config, workdir)
            with stages.device_work(config.device):  # never beside another worker's timing
                outputs = [_kept(task.run(task.model, i)) for i in range(config.input_sets)]
        except torch.OutOfMemoryError:
            raise
        except Exception as error:
            raise FilterFailed("eager_error", f"{type(error).__name__}: {str(error)[:400]}") from None
        check_outputs(outputs[0])
        stages.end()
        stages.begin("deterministic")
        check_deterministic(task, outputs[0], config)
        stages.end()
        stages.begin("degenerate")
        for other in outputs[1:]:
            check_outputs(other)
        check_not_degenerate(outputs, config)
        del outputs
        stages.end()
        stages.begin("workload")
        try:
            source, task = scale_workload(source, task, config, clock, workdir, stages)
            outcome.source, outcome.batch_size = source, batch_size_of(source)
            outcome.eager_ms, final_outputs = measure_ms(task, task.model, timer, stages)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # a size limit of some kernel, met at a scaled batch
            raise FilterFailed("eager_error", f"while scaling the batch: {type(error).__name__}: "
                                              f"{str(error)[:400]}") from None
        check_workload(outcome.eager_ms, config, outcome.batch_size)
        eager_outputs = as_output_list(final_outputs[0])
        check_outputs(eager_outputs)
        outcome.output_shapes = [list(o.shape) for o in eager_outputs]
        stages.end()
        if config.compile:
            stages.begin("compile")
            outcome.compile_ms = check_compile(task, eager_outputs, timer, stages)
            stages.end()
        outcome.kept = True
    except FilterFailed as failure:
        stages.end(passed=False)
        outcome.fail(failure.reason, failure.detail)
    except torch.OutOfMemoryError as error:
        stages.end(passed=False)
        outcome.fail("out_of_memory", f"in the {stages.stage} stage: {error}"[:300])
    finally:
        if temporary is not None:
            temporary.cleanup()
    return outcome
