"""What a timed call costs above the kernel itself: median time of the timed calls against the
profiler's device time, for the candidate and for the eager baseline, with the sandbox on and off
and the launch hidden under the flush or counted (`--count-launch`).

    python -m experiments.timed_call_overhead [--problem P --candidate C] [--json FILE]

On the H100 (2026-11-23) the bundled CUDA leaky ReLU (a 48 us kernel) timed at 138 us where the
test `test_a_kernel_on_the_timing_stream_is_timed_with_its_launch_hidden_under_the_flush` allows
kernel + 30 us, while the eager baseline of a 16 MiB ReLU timed within 2.5 us of its kernel: this
script separates the sandbox, the launch rule and the candidate's path, one variant per row.

`--gaps` times the eager leaky ReLU in this process through the same Timer with what may lie
between timed calls (nothing, the inputs and outputs going over the bus, an idle sleep; with and
without 20 ms of flushes first, to raise the clocks), with the SM clock NVML reports before each call.
H100 (2026-11-23): back to back 1.8 us above the kernel, after the bus or an idle 20 ms 29-32 us,
with the flushes first 33-40 us, the SM clock at 1980 MHz throughout. The candidate's timed calls,
which went over the bus, now run back to back (timer.staged_on_device): 51.2 us against 48.0.

`--steps` (#40): one launch-bound forward (`--forward`: a GEMM, scale and BatchNorm of KernelBench
v0.1's sizes, an exact `F.conv_transpose1d`, a chain of small element-wise operators, or a trivial
one) timed in this process by KernelBench's loop (`time_execution_with_cuda_event`: synchronise,
two events, a 256 MB L2 clear, record, call, record, synchronise) and by ours, the baseline's loop
(Timer.measure) and the candidate's (the worker's: staged fresh inputs, seeding, output copies);
each loop's median time, and the host's microseconds per step of it. All loops run before any
profiler session and again after one (Timer.profile, as the warm-up does before the timed calls):
CUPTI stays attached after a session unless Kineto is told to tear it down (TEARDOWN_CUPTI=1,
which the workers now set), and each launch then costs more. On the CPU the loops time with the
host clock (no KernelBench loop) and the steps show the Python-side costs of ours."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pytest_cudaagent import EvalConfig, evaluate

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {  # name -> (sandbox, overlap_launch)
    "sandboxed, launch hidden": (True, True),
    "not sandboxed, launch hidden": (False, True),
    "sandboxed, launch counted": (True, False),
    "not sandboxed, launch counted": (False, False),
}


def run_variant(problem: Path, candidate: Path, sandbox: bool, overlap: bool, device: str, policy: str) -> dict:
    config = EvalConfig(device=device, baselines=("eager",), sandbox=sandbox, policy=policy)
    config.timing_config.overlap_launch = overlap
    result = evaluate(problem, candidate, config)
    row = {"status": result.status}
    for name in ("candidate", "eager"):
        stats = result.timing.get(name)
        if stats is None:
            continue
        over = stats.median_ms - stats.device_ms if stats.device_ms is not None else None
        row[name] = {"median_ms": stats.median_ms, "device_ms": stats.device_ms, "over_device_us": over and 1000 * over,
                     "samples": stats.samples, "launch_overlapped": stats.launch_overlapped}
    row["phase_seconds"] = dict(result.phase_seconds)
    return row


def raise_clocks(timer, milliseconds: float = 20.0) -> None:
    """The device kept busy with flushes, then idle only while the host launches the next call."""
    import time

    import torch

    start = time.perf_counter()
    while time.perf_counter() - start < milliseconds / 1000:
        for _ in range(4):
            timer.flush_cache()
        torch.cuda.synchronize()


def gap_rows(calls: int = 10) -> dict:
    """Median timed call above the profiled kernel for each way of spending the time between calls."""
    import statistics
    import time

    import pynvml
    import torch

    from pytest_cudaagent.core.config import TimingConfig
    from pytest_cudaagent.timing.timer import Clock, Timer, load_content

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    timer = Timer(Clock("cuda"), TimingConfig())

    def leaky(x):
        return torch.nn.functional.leaky_relu(x, 0.01)

    host_sets = [[torch.randn(4096, 4096)] for _ in range(calls)]
    device_sets = [[value.cuda() for value in content] for content in host_sets]
    buffer = [device_sets[0][0].clone()]
    per_call_ms = timer.warm_up(lambda b: lambda: leaky(*b), [buffer])
    device_ms = timer.profile(leaky, [buffer], lambda call: call(), per_call_ms).device_ms

    def between(kind: str, index: int, output) -> None:
        if kind == "over the bus":
            output.to("cpu")
            load_content(buffer, [host_sets[index][0].to("cuda")])
        elif kind.startswith("idle"):
            time.sleep(0.02)
            load_content(buffer, device_sets[index])
        else:
            load_content(buffer, device_sets[index])

    rows = {}
    for kind in ("back to back", "over the bus", "idle 20 ms", "over the bus, clocks raised", "idle 20 ms, clocks raised"):
        samples, clocks = [], []
        output = leaky(*buffer)
        for index in range(calls):
            between(kind.split(",")[0], index, output)
            if kind.endswith("clocks raised"):
                raise_clocks(timer)
            clocks.append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            elapsed_ms, output = timer.timed_call(lambda: leaky(*buffer), True)
            samples.append(elapsed_ms)
        rows[kind] = {"median_us": 1000 * statistics.median(samples), "device_us": 1000 * device_ms,
                      "sm_clock_mhz": statistics.median(clocks)}
    return rows


# ----------------------------------------------------------------------------------------------
# --steps: one launch-bound timed call, step by step


def _gemm_scale_bn(device: str):
    """KernelBench v0.1's level 2 Gemm_Scale_BatchNorm sizes (batch 128, 1024 -> 512), train mode."""
    import torch

    class GemmScaleBn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gemm = torch.nn.Linear(1024, 512)
            self.scale = torch.nn.Parameter(torch.randn(512))
            self.bn = torch.nn.BatchNorm1d(512)

        def forward(self, x):
            return self.bn(self.gemm(x) * self.scale)

    return GemmScaleBn().to(device), lambda: [torch.randn(128, 1024, device=device)]


def _conv_transpose1d(device: str):
    """An exact F.conv_transpose1d forward of a few microseconds (16 x 32 x 128, kernel 3)."""
    import torch

    weight = torch.randn(32, 64, 3, device=device)
    return (lambda x: torch.nn.functional.conv_transpose1d(x, weight)), lambda: [torch.randn(16, 32, 128, device=device)]


def _elementwise_chain(device: str):
    """Eight small element-wise operators on 256 x 256: launch after launch."""
    import torch

    def chain(x):
        y = torch.relu(x * 1.5 + 0.5)
        y = torch.tanh(y) - x
        y = torch.sigmoid(y * y)
        return y.clamp(0.1, 0.9) + 1.0

    return chain, lambda: [torch.randn(256, 256, device=device)]


def _trivial(device: str):
    import torch

    return (lambda x: x + 1), lambda: [torch.randn(16, device=device)]


STEP_FORWARDS = {"gemm_scale_bn": _gemm_scale_bn, "conv_transpose1d": _conv_transpose1d,
                 "elementwise_chain": _elementwise_chain, "trivial": _trivial}


class _Steps:
    """Host nanoseconds per named step, summed over each call's steps."""

    def __init__(self):
        import time

        self.now = time.perf_counter_ns
        self.spent: dict[str, list[int]] = {}
        self._mark = 0

    def start(self) -> None:
        self._mark = self.now()

    def lap(self, step: str) -> None:
        now = self.now()
        self.spent.setdefault(step, []).append(now - self._mark)
        self._mark = now

    def medians_us(self) -> dict[str, float]:
        import statistics

        return {step: statistics.median(times) / 1000 for step, times in self.spent.items()}


def _kernelbench_loop(fn, inputs, calls: int, device: str) -> tuple[list[float], _Steps]:
    """KernelBench's time_execution_with_cuda_event, per call (its own code, written out here
    with a lap between steps); on the CPU, the host clock around the call after the same clear."""
    import torch

    steps, samples = _Steps(), []
    for _ in range(calls):
        steps.start()
        if device == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            steps.lap("sync + events")
            dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device=device)
            dummy.fill_(42)
            del dummy
            steps.lap("L2 clear")
            start.record()
            fn(*inputs)
            end.record()
            steps.lap("record, call, record")
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
            steps.lap("sync + elapsed")
        else:
            dummy = torch.empty((4, 1024, 1024), dtype=torch.int64)
            dummy.fill_(42)
            del dummy
            steps.lap("L2 clear")
            began = steps.now()
            fn(*inputs)
            samples.append((steps.now() - began) / 1e6)
            steps.lap("call")
    return samples, steps


def _our_timed_call(timer, call, overlap: bool, steps: _Steps) -> tuple[float, object]:
    """Timer.timed_call's steps, each lapped."""
    from pytest_cudaagent.timing.timer import call_time_ms

    timer.persistence.reset()
    steps.lap("persisting-L2 reset")
    timer.flush_cache()
    if not overlap:
        timer.clock.synchronize()
    steps.lap("L2 flush")
    elapsed_ms, stream_ms, output = timer.clock.time_call_split_ms(call)
    steps.lap("events, call, synchronise")
    timer.persistence.check("timed")
    steps.lap("persisting-L2 check")
    return call_time_ms(elapsed_ms, stream_ms, overlap, timer.config.sync_latency_ms), output


def _baseline_loop(timer, fn, content_sets, calls: int, overlap: bool) -> tuple[list[float], _Steps]:
    """Timer.measure's timed calls: a few buffers refilled round by round, the last output kept."""
    from pytest_cudaagent.timing.timer import input_buffers, load_content

    buffers, sets, steps, samples = input_buffers(content_sets), len(content_sets), _Steps(), []
    kept = [None] * sets
    for call_index in range(calls):
        steps.start()
        buffer_index, round_index = call_index % sets, call_index // sets
        if round_index:
            load_content(buffers[buffer_index], content_sets[(buffer_index + round_index) % sets])
        steps.lap("input refill")
        elapsed_ms, kept[buffer_index] = _our_timed_call(timer, lambda b=buffers[buffer_index]: fn(*b), overlap, steps)
        samples.append(elapsed_ms)
    return samples, steps


def _candidate_loop(timer, fn, content_sets, fresh_sets, device: str, overlap: bool) -> tuple[list[float], _Steps]:
    """The worker's timed calls: each on a fresh set staged on the device, seeded, its output
    copied into the slab taken before the first call and dropped."""
    from pytest_cudaagent.rules.outputs import inspect_outputs
    from pytest_cudaagent.timing.timer import OutputCopies, input_buffers, load_content
    from pytest_cudaagent.workers.worker import _seed_all

    buffers, steps, samples = input_buffers(content_sets), _Steps(), []
    probe = fn(*buffers[0])
    output_bytes = [probe.numel() * probe.element_size()]
    del probe
    copies = OutputCopies(output_bytes, len(fresh_sets), device)
    for call_index, inputs in enumerate(fresh_sets):
        steps.start()
        buffer = buffers[call_index % len(buffers)]
        load_content(buffer, inputs)
        steps.lap("input refill")
        _seed_all(call_index)
        steps.lap("seed")
        elapsed_ms, output = _our_timed_call(timer, lambda b=buffer: fn(*b), overlap, steps)
        samples.append(elapsed_ms)
        inspect_outputs(output, [], device, copy_with=copies.copy)
        del output
        steps.lap("output check + copy")
    return samples, steps


def step_rows(forward: str, calls: int, device: str) -> dict:
    """Each loop's median time and host steps, before and after a profiler session."""
    import os
    import statistics

    import torch

    from pytest_cudaagent.core.config import TimingConfig
    from pytest_cudaagent.timing.timer import Clock, Timer

    fn, make_inputs = STEP_FORWARDS[forward](device)
    timer = Timer(Clock(device), TimingConfig())
    content_sets = [make_inputs() for _ in range(3)]
    with torch.no_grad():
        per_call_ms = timer.warm_up(lambda buffer: lambda: fn(*buffer), content_sets)
        rows: dict = {"forward": forward, "device": device, "warm_per_call_ms": per_call_ms,
                      "teardown_cupti": os.environ.get("TEARDOWN_CUPTI", ""), "phases": {}}
        for phase in ("before any profiler session", "after a profiler session"):
            if phase.startswith("after"):
                profiled = timer.profile(fn, content_sets, lambda call: call(), per_call_ms)
                if profiled is not None:
                    rows["device_ms"], rows["other_streams"] = profiled.device_ms, profiled.other_streams
            loops = {"KernelBench's loop": _kernelbench_loop(fn, content_sets[0], calls, device),
                     "ours, baseline (Timer.measure)": _baseline_loop(timer, fn, content_sets, calls, overlap=True),
                     "ours, baseline, launch counted": _baseline_loop(timer, fn, content_sets, calls, overlap=False),
                     "ours, candidate (worker)": _candidate_loop(timer, fn, content_sets,
                                                                 [make_inputs() for _ in range(calls)], device,
                                                                 overlap=True)}
            rows["phases"][phase] = {name: {"median_ms": statistics.median(samples), "steps_us": steps.medians_us()}
                                     for name, (samples, steps) in loops.items()}
    return rows


def print_steps(rows: dict, forward: str, device: str, console: Console) -> None:
    device_ms = rows.get("device_ms")
    title = f"{forward} on {device}, TEARDOWN_CUPTI={rows['teardown_cupti'] or 'unset'}: timed call median and the host's us per step"
    table = Table(title=title + (f" (device time {1000 * device_ms:.1f} us)" if device_ms else ""))
    for column in ("phase", "loop", "median us", "host us per step"):
        table.add_column(column)
    for phase, loops in rows["phases"].items():
        for name, row in loops.items():
            steps = ", ".join(f"{step} {us:.1f}" for step, us in row["steps_us"].items())
            table.add_row(phase, name, f"{1000 * row['median_ms']:.1f}", steps)
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, default=REPO / "examples/problems/leaky_relu.py")
    parser.add_argument("--candidate", type=Path, default=REPO / "examples/candidates/cuda/leaky_relu.py")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--policy", default="strict", choices=("strict", "permissive"),
                        help="permissive for a candidate made of PyTorch operators")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--gaps", action="store_true", help="the in-process gap rows only")
    parser.add_argument("--steps", action="store_true", help="per-step host profile of one launch-bound timed call, "
                        "ours against KernelBench's loop, in this process")
    parser.add_argument("--forward", default="gemm_scale_bn", choices=sorted(STEP_FORWARDS),
                        help="--steps: the launch-bound forward to time")
    parser.add_argument("--calls", type=int, default=300, help="--steps: timed calls per loop")
    parser.add_argument("--teardown", choices=("0", "1", "both"), default="both",
                        help="--steps: TEARDOWN_CUPTI for the run; both: a fresh process with each (default)")
    args = parser.parse_args(argv)
    console = Console(width=150)
    if args.steps:
        runs = {}
        for teardown in ("0", "1") if args.teardown == "both" else (args.teardown,):
            if args.teardown == "both":  # Kineto reads it when a session ends: a process of its own each
                import subprocess
                import tempfile

                with tempfile.NamedTemporaryFile(suffix=".json") as child_json:
                    subprocess.run([sys.executable, "-m", "experiments.timed_call_overhead", "--steps",
                                    "--device", args.device, "--forward", args.forward, "--calls", str(args.calls),
                                    "--teardown", teardown, "--json", child_json.name],
                                   env={**os.environ, "TEARDOWN_CUPTI": teardown}, check=True)
                    runs[teardown] = json.loads(Path(child_json.name).read_text())[teardown]
            else:
                os.environ["TEARDOWN_CUPTI"] = teardown
                runs[teardown] = step_rows(args.forward, args.calls, args.device)
                print_steps(runs[teardown], args.forward, args.device, console)
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1))
        return 0
    if args.gaps:
        gaps = gap_rows()
        table = Table(title="eager leaky ReLU (64 MiB) through Timer.timed_call, by what lies between calls")
        for column in ("between calls", "median us", "device us", "median - device us", "SM clock MHz"):
            table.add_column(column)
        for kind, row in gaps.items():
            table.add_row(kind, f"{row['median_us']:.1f}", f"{row['device_us']:.1f}",
                          f"{row['median_us'] - row['device_us']:.1f}", f"{row['sm_clock_mhz']:.0f}")
        console.print(table)
        if args.json:
            args.json.write_text(json.dumps(gaps, indent=1))
        return 0
    rows = {}
    for name, (sandbox, overlap) in VARIANTS.items():
        rows[name] = run_variant(args.problem, args.candidate, sandbox, overlap, args.device, args.policy)
        console.print(f"{name}: {rows[name]['status']}")
    table = Table(title=f"timed call above device time: {args.candidate.name} on {args.device}")
    for column in ("variant", "who", "median us", "device us", "median - device us", "samples", "launch hidden"):
        table.add_column(column)
    for name, row in rows.items():
        for who in ("candidate", "eager"):
            if who not in row:
                continue
            stats = row[who]
            device_us = stats["device_ms"] and 1000 * stats["device_ms"]
            table.add_row(name, who, f"{1000 * stats['median_ms']:.1f}", f"{device_us:.1f}" if device_us else "-",
                          f"{stats['over_device_us']:.1f}" if stats["over_device_us"] is not None else "-",
                          str(stats["samples"]), str(stats["launch_overlapped"]))
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
