"""Synchronised, warmed-up timing of one callable over rotating fresh inputs, on a GPU or the CPU.

Import this module before any candidate code: `Clock` keeps references to the clocks and
synchronisation functions as they were then, so a candidate that patches `time.*`,
`torch.cuda.Event` or `torch.cuda.synchronize` changes nothing here.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .config import TimingConfig

_perf_counter_ns = time.perf_counter_ns


class Clock:
    """Clock and synchronisation primitives captured before a candidate is imported."""

    def __init__(self, device: str):
        self.device = device
        self.now_ns = _perf_counter_ns
        if device == "cuda":
            # The C-level event type and functions: a candidate can rebind torch.cuda.Event or
            # torch.cuda.synchronize, but not methods of a builtin type.
            self._event_type = torch._C._CudaEventBase
            self._record = torch._C._CudaEventBase.record
            self._elapsed = torch._C._CudaEventBase.elapsed_time
            self._event_sync = torch._C._CudaEventBase.synchronize
            self._device_sync = torch._C._cuda_synchronize
            self._stream = torch.cuda.current_stream()

    def synchronize(self) -> None:
        if self.device == "cuda":
            self._device_sync()

    def time_call_ms(self, call: Callable[[], object]) -> tuple[float, object]:
        """Time one call, with a device-wide synchronisation inside the timed region so work
        the call left running on other streams is counted."""
        if self.device != "cuda":
            start = self.now_ns()
            output = call()
            return (self.now_ns() - start) / 1e6, output
        start_event = self._event_type(enable_timing=True)
        end_event = self._event_type(enable_timing=True)
        self._record(start_event, self._stream)
        output = call()
        self._device_sync()
        self._record(end_event, self._stream)
        self._event_sync(end_event)
        return self._elapsed(start_event, end_event), output


@dataclass
class Measurement:
    samples_ms: list[float]
    # Output of the last timed call on each content set, for checking against the reference.
    final_outputs: list[object]
    # Outputs of the audited check round (one call per content set), when an audit was given.
    audited_outputs: list[object] = field(default_factory=list)
    device_ms: float | None = None  # median over profiled calls of the summed kernel durations
    device_span_ms: float | None = None  # median of first kernel start to last kernel end
    kernel_names: list[str] = field(default_factory=list)  # kernels seen by the profiler


def _tensor_slots(inputs: Sequence[object]) -> list[int]:
    return [i for i, value in enumerate(inputs) if isinstance(value, torch.Tensor)]


def _load_content(buffers: list[object], content: Sequence[object]) -> None:
    for index in _tensor_slots(content):
        buffers[index].copy_(content[index])


def _sample_count(per_call_ms: float, config: TimingConfig, sets: int) -> int:
    wanted = int(config.repeat_ms / max(per_call_ms, 1e-3))
    wanted = max(config.min_samples, min(config.max_samples, wanted))
    rounds = max(2, -(-wanted // sets))
    # In round r buffer b holds content (b + r) % sets. The last round must not give any buffer
    # its first content back, so a result memoised by buffer address comes out wrong.
    while sets > 1 and (rounds - 1) % sets == 0:
        rounds += 1
    return rounds * sets


class Timer:
    """Times `fn(*inputs)`; `fn` is the model's forward (or a baseline's)."""

    def __init__(self, clock: Clock, config: TimingConfig):
        self.clock = clock
        self.config = config
        flush_bytes = config.l2_flush_bytes if clock.device == "cuda" else 32 * 1024 * 1024
        self._flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.int32, device=clock.device)

    def flush_cache(self) -> None:
        self._flush_buffer.fill_(0)  # writing more than the cache holds evicts the candidate's data

    def measure(
        self,
        fn: Callable[..., object],
        content_sets: Sequence[Sequence[object]],
        audit: Callable[[Callable[[], object]], object] | None = None,
        before_audited_call: Callable[[], object] | None = None,
    ) -> Measurement:
        """`content_sets` are input sets already on the device. Each call gets one of a few
        buffers, refilled with another content set every round (outside the timed region).

        Timed calls run bare, so the samples carry no auditing overhead (a dispatch audit adds
        ~25 us per call on an H100, a third of a 70 us kernel). With `audit`, one more round,
        untimed, runs every content set under it and keeps its outputs, and the profiled
        device-time calls run under it too: what the candidate does when watched is checked, and
        the parent compares the bare timings with the watched kernels' span."""
        sets = len(content_sets)
        buffers = [
            [value.clone() if isinstance(value, torch.Tensor) else value for value in content]
            for content in content_sets
        ]

        timed_run = audit if (audit is not None and self.config.audit_timed_calls) else None

        def call_on(buffer: list[object]) -> Callable[[], object]:
            if timed_run is not None:
                return lambda: timed_run(lambda: fn(*buffer))
            return lambda: fn(*buffer)

        # Warm-up: every buffer once (first calls compile, autotune, allocate), then by time.
        warmup_times = []
        for buffer in buffers:
            self.clock.synchronize()
            warmup_times.append(self.clock.time_call_ms(call_on(buffer))[0])
        warm_start = self.clock.now_ns()
        while (self.clock.now_ns() - warm_start) / 1e6 < self.config.warmup_ms:
            for buffer in buffers:
                warmup_times.append(self.clock.time_call_ms(call_on(buffer))[0])
        per_call_ms = statistics.median(warmup_times[sets:] or warmup_times)

        samples: list[float] = []
        final_outputs: list[object] = [None] * sets
        total = _sample_count(per_call_ms, self.config, sets)
        for call_index in range(total):
            buffer_index, round_index = call_index % sets, call_index // sets
            content_index = (buffer_index + round_index) % sets
            if round_index > 0:
                _load_content(buffers[buffer_index], content_sets[content_index])
            self.flush_cache()
            self.clock.synchronize()
            elapsed_ms, output = self.clock.time_call_ms(call_on(buffers[buffer_index]))
            samples.append(elapsed_ms)
            final_outputs[content_index] = output
        measurement = Measurement(samples, final_outputs)
        run = audit or (lambda call: call())
        if audit is not None:
            for buffer_index, content in enumerate(content_sets):
                _load_content(buffers[buffer_index], content)
                if before_audited_call:
                    before_audited_call()
                measurement.audited_outputs.append(run(lambda buffer=buffers[buffer_index]: fn(*buffer)))
            self.clock.synchronize()
        if self.clock.device == "cuda" and self.config.device_time:
            measurement.device_ms, measurement.device_span_ms, measurement.kernel_names = (
                self.device_time(fn, buffers, run))
        return measurement

    def device_time(self, fn, buffers, run) -> tuple[float, float, list[str]]:
        """Median over calls of the summed kernel durations the profiler records (and of their
        span, first start to last end), with the L2 flushed before each call and each call
        profiled alone, so no flush kernel is counted."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        per_call_ms, spans_ms, names = [], [], set()
        for call_index in range(self.config.device_time_calls):
            buffer = buffers[call_index % len(buffers)]
            self.flush_cache()
            self.clock.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run(lambda buffer=buffer: fn(*buffer))
                self.clock.synchronize()
            kernels = [
                event
                for event in prof.profiler.kineto_results.events()
                if event.device_type() == DeviceType.CUDA
            ]
            names.update(event.name() for event in kernels)
            per_call_ms.append(sum(event.duration_ns() for event in kernels) / 1e6)
            if kernels:
                spans_ms.append((max(e.end_ns() for e in kernels) - min(e.start_ns() for e in kernels)) / 1e6)
        span = statistics.median(spans_ms) if spans_ms else 0.0
        return statistics.median(per_call_ms), span, sorted(names)
