"""Synchronised, warmed-up timing of one callable over rotating fresh inputs, on a GPU or the CPU.

Import this module before any candidate code: `Clock` keeps references to the clocks and
synchronisation functions as they were then, so a candidate that patches `time.*`,
`torch.cuda.Event` or `torch.cuda.synchronize` changes nothing here.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .config import TimingConfig
from .l2_persistence import persistence_guard

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

    def timing_stream_handle(self) -> int:
        """The timing stream's cudaStream_t as an integer (0 on the CPU)."""
        return self._stream.cuda_stream if self.device == "cuda" else 0

    def synchronize(self) -> None:
        if self.device == "cuda":
            self._device_sync()

    def time_call_ms(self, call: Callable[[], object]) -> tuple[float, object]:
        """Time one call, with a device-wide synchronisation inside the timed region so work
        the call left running on other streams is counted."""
        elapsed_ms, _, output = self.time_call_split_ms(call)
        return elapsed_ms, output

    def time_call_split_ms(self, call: Callable[[], object]) -> tuple[float, float | None, object]:
        """(start to after a device-wide synchronisation, start to the end of the call's work on
        the timing stream, output). The second leaves out the host's wake-up from the
        synchronisation and its next launch (about 11 us, varying by a few from process to
        process on an H100); None on the CPU."""
        if self.device != "cuda":
            start = self.now_ns()
            output = call()
            return (self.now_ns() - start) / 1e6, None, output
        start_event = self._event_type(enable_timing=True)
        stream_end_event = self._event_type(enable_timing=True)
        end_event = self._event_type(enable_timing=True)
        self._record(start_event, self._stream)
        output = call()
        self._record(stream_end_event, self._stream)
        self._device_sync()
        self._record(end_event, self._stream)
        self._event_sync(end_event)
        return self._elapsed(start_event, end_event), self._elapsed(start_event, stream_end_event), output


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
    launch_overlapped: bool = False  # the host launched while the flush ran (see TimingConfig)


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


def call_time_ms(synchronised_ms: float, stream_ms: float | None, overlapped: bool,
                 sync_latency_ms: float) -> float:
    """One timed call's time. With the launch overlapped (every kernel on the timing stream when
    profiled), the call's end on the timing stream is its end, unless the device-wide
    synchronisation came back more than `sync_latency_ms` after it: then work elsewhere ran on,
    and the synchronised end counts. Otherwise the synchronised end always counts."""
    if overlapped and stream_ms is not None and synchronised_ms - stream_ms <= sync_latency_ms:
        return stream_ms
    return synchronised_ms


class Timer:
    """Times `fn(*inputs)`; `fn` is the model's forward (or a baseline's)."""

    def __init__(self, clock: Clock, config: TimingConfig):
        self.clock = clock
        self.config = config
        flush_bytes = config.l2_flush_bytes if clock.device == "cuda" else 32 * 1024 * 1024
        self._flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.int32, device=clock.device)
        if clock.device == "cuda":
            # Captured before the candidate is imported, like the clock.
            self._flush_stream = torch.cuda.Stream()
            self._marker = torch.empty(1, dtype=torch.int32, device="cuda")
            self._stream_context = torch.cuda.stream
        # Persisting L2 lines would survive the flush: reset before each flushed call, read back
        # after it (l2_persistence.py). Violations wait in `persistence.drain()`.
        self.persistence = persistence_guard(clock.device, clock.timing_stream_handle(), clock.synchronize)

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
        run = audit or (lambda call: call())

        # Profiled first: whether the candidate's work stays on the timing stream decides how
        # the timed calls are measured.
        profiled = None
        if self.clock.device == "cuda" and self.config.device_time:
            profiled = self.device_time(fn, buffers, run, per_call_ms)
        overlap = self.config.overlap_launch and profiled is not None and not profiled.other_streams

        samples: list[float] = []
        final_outputs: list[object] = [None] * sets
        total = _sample_count(per_call_ms, self.config, sets)
        for call_index in range(total):
            buffer_index, round_index = call_index % sets, call_index // sets
            content_index = (buffer_index + round_index) % sets
            if round_index > 0:
                _load_content(buffers[buffer_index], content_sets[content_index])
            self.persistence.reset()
            self.flush_cache()
            if not overlap:
                self.clock.synchronize()
            # Else every stream is already idle (the last call ended in a device-wide
            # synchronisation) and the start event waits behind the flush while the host launches.
            elapsed_ms, stream_ms, output = self.clock.time_call_split_ms(call_on(buffers[buffer_index]))
            self.persistence.check("timed")
            samples.append(call_time_ms(elapsed_ms, stream_ms, overlap, self.config.sync_latency_ms))
            final_outputs[content_index] = output
        measurement = Measurement(samples, final_outputs, launch_overlapped=overlap)
        if profiled is not None:
            measurement.device_ms, measurement.device_span_ms = profiled.device_ms, profiled.span_ms
            measurement.kernel_names = profiled.kernel_names
        if audit is not None:
            for buffer_index, content in enumerate(content_sets):
                _load_content(buffers[buffer_index], content)
                if before_audited_call:
                    before_audited_call()
                measurement.audited_outputs.append(run(lambda buffer=buffers[buffer_index]: fn(*buffer)))
            self.clock.synchronize()
        return measurement

    def device_time(self, fn, buffers, run, per_call_ms: float) -> ProfiledCalls:
        """Median over calls of the summed kernel durations the profiler records (and of their
        span, first start to last end), with the L2 flushed before each call; and whether any
        of the calls' work ran on a stream other than the timing stream.

        All calls are profiled in one session, warm-up calls first: a session per call leaves
        the GPU idle while the profiler starts, and a compute-bound kernel then runs at idle
        clocks (an fp32 GEMM took 2.7 ms profiled that way against 1.46 ms in the timed loop).
        A marker on the timing stream opens the session; the flushes run on the timer's private
        stream and mark where one call ends and the next begins; neither is counted."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        warm_calls = max(2, min(50, math.ceil(self.config.device_time_warmup_ms / max(per_call_ms, 1e-3))))
        total_calls = warm_calls + self.config.device_time_calls
        self.clock.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            self._marker.fill_(0)  # on the timing stream
            self.clock.synchronize()
            for call_index in range(total_calls):
                buffer = buffers[call_index % len(buffers)]
                self.persistence.reset()
                self._flush_on_private_stream()
                self.clock.synchronize()
                run(lambda buffer=buffer: fn(*buffer))
                self.clock.synchronize()
                self.persistence.check("profiled")
            self._flush_on_private_stream()  # closes the last call
            self.clock.synchronize()
        events = [event for event in prof.profiler.kineto_results.events() if event.device_type() == DeviceType.CUDA]
        return split_calls(events, total_calls, skip=warm_calls)

    def _flush_on_private_stream(self) -> None:
        with self._stream_context(self._flush_stream):
            self.flush_cache()


@dataclass
class ProfiledCalls:
    device_ms: float  # median over calls of the summed kernel durations
    span_ms: float  # median over calls of first kernel start to last kernel end
    kernel_names: list[str]
    other_streams: bool  # some of the calls' work ran off the timing stream


def split_calls(events: list, calls: int, skip: int = 0) -> ProfiledCalls:
    """The profiled session's events, as calls: the earliest event is the marker on the timing
    stream, the next the first flush, which names the flush stream; the work between two
    flushes is one call's. The first `skip` calls (warm-up) are not counted."""
    events = sorted(events, key=lambda event: event.start_ns())
    if len(events) < 2:
        raise RuntimeError("the profiler recorded no marker and flush: device time cannot be measured")
    timing_stream, flush_stream = events[0].device_resource_id(), events[1].device_resource_id()
    flushes = [event for event in events[1:] if event.device_resource_id() == flush_stream]
    work = [event for event in events[1:] if event.device_resource_id() != flush_stream]
    if len(flushes) != calls + 1 or timing_stream == flush_stream:
        raise RuntimeError(f"the profiler recorded {len(flushes)} flushes around {calls} calls; "
                           "its stream ids cannot tell the calls apart on this torch version")
    per_call, spans = [], []
    for before, after in list(itertools.pairwise(flushes))[skip:]:
        kernels = [event for event in work if before.end_ns() <= event.start_ns() < after.start_ns()]
        per_call.append(sum(event.duration_ns() for event in kernels) / 1e6)
        spans.append((max(e.end_ns() for e in kernels) - min(e.start_ns() for e in kernels)) / 1e6
                     if kernels else 0.0)
    return ProfiledCalls(
        device_ms=statistics.median(per_call) if per_call else 0.0,
        span_ms=statistics.median(spans) if spans else 0.0,
        kernel_names=sorted({event.name() for event in work}),
        other_streams=any(event.device_resource_id() != timing_stream for event in work),
    )
