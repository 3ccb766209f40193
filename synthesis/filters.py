"""The paper's task filters, as plain functions over one problem's source: runs in eager mode,
deterministic, not degenerate, a workload inside the runtime window (scaling the batch to get
there), and runs under torch.compile with matching outputs. `check_task` runs them in order,
cheapest first, and stops at the first failure; torch.compile runs last, only on survivors.

Runs inside a filter worker (filter_worker.py), never in the pipeline's own process: the source
is generated code.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pytest_cudaagent.compare import as_output_list, compare_outputs
from pytest_cudaagent.config import DEFAULT_TOLERANCES, TimingConfig, Tolerance
from pytest_cudaagent.files import import_file
from pytest_cudaagent.locks import device_lock
from pytest_cudaagent.timer import Clock, Timer

from .render import BATCH_VARIABLE

# Every reason a task can be dropped for, as the manifest names it.
REASONS = (
    "bad_format", "stochastic_operator", "contaminated_kernelbench", "duplicate", "eager_error",
    "bad_output", "nan_or_inf", "nondeterministic", "constant_output", "nearly_constant_output",
    "input_independent", "workload_too_fast", "workload_too_slow", "compile_error",
    "compile_mismatch", "timeout", "crashed",
)


def _fast_timing() -> TimingConfig:
    # A filter needs to know whether a task lands in a window a hundredfold wide, not its time to
    # a percent: short budgets, two rotating inputs, no profiler pass.
    return TimingConfig(warmup_ms=10.0, repeat_ms=40.0, min_samples=5, max_samples=200,
                        rotating_inputs=2, device_time=False)


@dataclass
class FilterConfig:
    device: str = "cuda"
    min_ms: float = 1.0  # the paper's workload window for eager runtime
    max_ms: float = 100.0
    compile: bool = True  # the torch.compile filter (the costly one; off only in quick tests)
    input_sets: int = 3  # distinct inputs, for the dependence check and the timing rotation
    # The evaluator's tolerances decide what a cheat could pass with: an output that a constant,
    # or another input's output, matches on this share of elements is degenerate.
    degenerate_fraction: float = 0.99
    # Two runs on one input may differ by reduction order (atomics), never by a random draw.
    determinism_tolerance: float = 1e-4
    max_scale_steps: int = 8
    max_batch: int = 1 << 20
    max_input_bytes: int = 4 << 30  # the scaled inputs must fit the device with room to spare
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
        # Aim low in the window (filtering is paid per call), but far enough from the floor that
        # timing noise does not push the final measurement out.
        return min(math.sqrt(self.min_ms * self.max_ms), 4 * self.min_ms)


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
    filter_seconds: dict[str, float] = field(default_factory=dict)

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
    """A task imported from its source, its model built and its input sets drawn."""

    _counter = 0

    def __init__(self, source: str, config: FilterConfig, workdir: Path):
        LoadedTask._counter += 1
        path = workdir / f"task_{LoadedTask._counter}.py"
        path.write_text(source)
        self.module = import_file(path, f"cudaagent_synth_task_{LoadedTask._counter}")
        self.device = config.device
        torch.manual_seed(0)
        self.model = self.module.Model(*self.module.get_init_inputs()).to(self.device).eval()
        self.input_sets = []
        for index in range(config.input_sets):
            torch.manual_seed(1000 + index)
            self.input_sets.append(
                [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in self.module.get_inputs()]
            )

    def run(self, fn, index: int) -> list:
        with torch.no_grad():
            return as_output_list(fn(*self.input_sets[index]))

    def input_bytes(self) -> int:
        return sum(v.numel() * v.element_size() for s in self.input_sets[:1] for v in s if isinstance(v, torch.Tensor))


def _cpu(outputs: list) -> list:
    return [o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in outputs]


def _matching_fraction(expected: list, actual: list, tolerances=DEFAULT_TOLERANCES) -> float:
    trial = compare_outputs(0, expected, actual, tolerances)
    if trial.error and not trial.mismatches:  # shape or type differs: nothing matches
        return 0.0
    return 1.0 - trial.mismatches / max(trial.numel, 1)


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
    again = _cpu(task.run(task.model, 0))
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


def _quick_ms(task: LoadedTask, clock: Clock) -> float:
    """A cheap estimate for choosing the batch: median of three calls after one warm-up."""
    with torch.no_grad(), device_lock(task.device):
        task.run(task.model, 0)
        clock.synchronize()
        times = [clock.time_call_ms(lambda: task.model(*task.input_sets[0]))[0] for _ in range(3)]
    return statistics.median(times)


def scale_workload(source: str, task: LoadedTask, config: FilterConfig, clock: Clock, workdir: Path):
    """Scale the batch until a quick estimate lands in the window. Returns (source, task)."""
    batch = batch_size_of(source)
    for _ in range(config.max_scale_steps):
        estimate = _quick_ms(task, clock)
        if config.min_ms <= estimate <= config.max_ms or batch is None:
            return source, task
        wanted = batch * config.target_ms / max(estimate, 1e-4)
        per_sample_bytes = task.input_bytes() / batch
        ceiling = min(config.max_batch, int(config.max_input_bytes / max(per_sample_bytes, 1)))
        new_batch = max(1, min(ceiling, round(wanted)))
        if new_batch == batch:
            break
        candidate_source = with_batch_size(source, new_batch)
        try:
            candidate = LoadedTask(candidate_source, config, workdir)
        except torch.OutOfMemoryError:
            if new_batch < batch:
                raise
            break  # cannot grow further: the final measurement decides
        del task
        source, task, batch = candidate_source, candidate, new_batch
    return source, task


def measure_ms(task: LoadedTask, fn, timer: Timer) -> tuple[float, list]:
    with torch.no_grad(), device_lock(task.device):
        measurement = timer.measure(fn, task.input_sets[: max(1, timer.config.rotating_inputs)])
    return statistics.median(measurement.samples_ms), measurement.final_outputs


def check_workload(eager_ms: float, config: FilterConfig) -> None:
    if eager_ms < config.min_ms:
        raise FilterFailed("workload_too_fast",
                           f"eager {eager_ms:.3g} ms < {config.min_ms} ms at the largest batch tried")
    if eager_ms > config.max_ms:
        raise FilterFailed("workload_too_slow",
                           f"eager {eager_ms:.3g} ms > {config.max_ms} ms at the smallest batch tried")


def check_compile(task: LoadedTask, timer: Timer) -> float:
    """Compile, compare with eager on the final inputs, time. Returns compile_ms."""
    import torch._dynamo

    expected = _cpu(task.run(task.model, 0))
    try:
        try:
            compiled = torch.compile(task.model)
            actual = _cpu(task.run(compiled, 0))
        except Exception as error:
            raise FilterFailed("compile_error", f"{type(error).__name__}: {str(error)[:400]}") from None
        trial = compare_outputs(0, expected, actual, DEFAULT_TOLERANCES)
        if not trial.correct:
            raise FilterFailed("compile_mismatch", trial.error or "outputs differ")
        compile_ms, _ = measure_ms(task, compiled, timer)
    finally:
        torch._dynamo.reset()  # this worker compiles thousands of models: drop their caches
    return compile_ms


def check_task(source: str, config: FilterConfig, clock: Clock | None = None,
               timer: Timer | None = None, workdir: Path | None = None) -> FilterOutcome:
    """Every runtime filter, cheapest first; the first failure ends the check."""
    clock = clock or Clock(config.device)
    timer = timer or Timer(clock, config.timing)
    outcome = FilterOutcome(source=source, batch_size=batch_size_of(source))
    temporary = None
    if workdir is None:
        temporary = tempfile.TemporaryDirectory(prefix="cudaagent-synth-")
        workdir = Path(temporary.name)
    stage = "eager"
    started = time.perf_counter()

    def finish_stage(name: str) -> None:
        nonlocal started
        outcome.filter_seconds[name] = outcome.filter_seconds.get(name, 0.0) + time.perf_counter() - started
        outcome.checks[name] = "pass"
        started = time.perf_counter()

    try:
        try:
            task = LoadedTask(source, config, workdir)
            outputs = [_cpu(task.run(task.model, i)) for i in range(config.input_sets)]
        except FilterFailed:
            raise
        except Exception as error:
            raise FilterFailed("eager_error", f"{type(error).__name__}: {str(error)[:400]}") from None
        check_outputs(outputs[0])
        finish_stage("eager")
        stage = "deterministic"
        check_deterministic(task, outputs[0], config)
        finish_stage("deterministic")
        stage = "degenerate"
        for other in outputs[1:]:
            check_outputs(other)
        check_not_degenerate(outputs, config)
        finish_stage("degenerate")
        stage = "workload"
        source, task = scale_workload(source, task, config, clock, workdir)
        outcome.source, outcome.batch_size = source, batch_size_of(source)
        outcome.eager_ms, final_outputs = measure_ms(task, task.model, timer)
        check_workload(outcome.eager_ms, config)
        check_outputs(as_output_list(final_outputs[0]))
        outcome.output_shapes = [list(o.shape) for o in as_output_list(final_outputs[0])]
        finish_stage("workload")
        if config.compile:
            stage = "compile"
            outcome.compile_ms = check_compile(task, timer)
            finish_stage("compile")
        outcome.kept = True
    except FilterFailed as failure:
        outcome.filter_seconds[stage] = outcome.filter_seconds.get(stage, 0.0) + time.perf_counter() - started
        outcome.checks[stage] = "fail"
        outcome.fail(failure.reason, failure.detail)
    except torch.OutOfMemoryError as error:
        outcome.checks[stage] = "fail"
        outcome.fail("workload_too_slow" if stage == "workload" else "eager_error", f"out of memory: {error}"[:300])
    finally:
        if temporary is not None:
            temporary.cleanup()
    return outcome
