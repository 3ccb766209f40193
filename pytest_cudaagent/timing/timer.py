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

from ..core.config import TimingConfig
from ..core.tensor_trees import map_tensors, nbytes, refill, tensors
from ..rules.l2_persistence import persistence_guard
from . import gc_pause

_perf_counter_ns = time.perf_counter_ns


class Clock:
    """Clock and synchronisation primitives captured before a candidate is imported."""

    def __init__(self, device: str):
        self.device = device
        self.now_ns = _perf_counter_ns
        # The last timed call's host clock readings (CLOCK_MONOTONIC ns, the clock every process
        # of the machine reads): the evaluating process checks them against its own
        # (outside_view.py), since everything here is within a candidate's reach.
        self.last_span_ns = (0, 0)
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
            end = self.now_ns()
            self.last_span_ns = (start, end)
            return (end - start) / 1e6, None, output
        start_event = self._event_type(enable_timing=True)
        stream_end_event = self._event_type(enable_timing=True)
        end_event = self._event_type(enable_timing=True)
        start = self.now_ns()
        self._record(start_event, self._stream)
        output = call()
        self._record(stream_end_event, self._stream)
        self._device_sync()
        self._record(end_event, self._stream)
        self._event_sync(end_event)
        self.last_span_ns = (start, self.now_ns())
        return self._elapsed(start_event, end_event), self._elapsed(start_event, stream_end_event), output


@dataclass
class Measurement:
    samples_ms: list[float]
    # Output of the last timed call on each content set, for checking against the reference.
    final_outputs: list[object]
    device_ms: float | None = None  # median over profiled calls of the summed kernel durations
    device_busy_ms: float | None = None  # median over profiled calls of the union of kernel intervals
    kernel_names: list[str] = field(default_factory=list)  # kernels seen by the profiler
    launch_overlapped: bool = False  # the host launched while the flush ran (see TimingConfig)
    started_ns: list[int] = field(default_factory=list)  # each timed call's start, host CLOCK_MONOTONIC


def load_content(buffers: list[object], content: Sequence[object]) -> None:
    """Each input of `buffers` refilled with `content`'s, tensors nested in lists, tuples and
    dicts included (tensor_trees.py): the buffer's tensors get the new values, in the content's
    structure."""
    for index, value in enumerate(content):
        buffers[index] = refill(buffers[index], value)


def input_buffers(content_sets: Sequence[Sequence[object]]) -> list[list[object]]:
    """One private buffer set per content set: the calls run on these, refilled between calls."""
    return [[map_tensors(torch.Tensor.clone, value) for value in content] for content in content_sets]


def _sample_count(per_call_ms: float, config: TimingConfig, sets: int) -> int:
    wanted = int(config.repeat_ms / max(per_call_ms, 1e-3))
    wanted = max(config.min_samples, min(config.max_samples, wanted))
    rounds = max(2, -(-wanted // sets))
    # In round r buffer b holds content (b + r) % sets. The last round must not give any buffer
    # its first content back, so a result memoised by buffer address comes out wrong.
    while sets > 1 and (rounds - 1) % sets == 0:
        rounds += 1
    return rounds * sets


def host_bound(per_call_ms: float, device_ms: float | None, config: TimingConfig) -> bool:
    """A call whose wall time is host_bound_ratio times its device time or more (known on the
    GPU only): its time is the host's, launching one small operator after another."""
    return bool(config.host_bound_ratio is not None and device_ms and per_call_ms >= config.host_bound_ratio * device_ms)


def repeat_budget_ms(per_call_ms: float, device_ms: float | None, config: TimingConfig) -> float:
    """The time the timed calls may take: repeat_ms, or host_bound_repeat_ms for a host-bound
    call."""
    if host_bound(per_call_ms, device_ms, config):
        return max(config.repeat_ms, config.host_bound_repeat_ms)
    return config.repeat_ms


def timing_rounds(per_call_ms: float, device_ms: float | None, config: TimingConfig) -> int:
    """How many alternating rounds the candidate's timed calls and the eager baseline's take:
    timing_rounds, or host_bound_rounds for a host-bound call where that is more."""
    if host_bound(per_call_ms, device_ms, config):
        return max(config.timing_rounds, config.host_bound_rounds)
    return config.timing_rounds


def fresh_call_count(per_call_ms: float, set_bytes: int, config: TimingConfig, device_ms: float | None = None) -> int:
    """How many timed calls, each on content never seen before: as many as the repeat budget
    wants (repeat_budget_ms: longer for a host-bound call, and at least host_bound_min_samples
    for one), within the memory the fresh sets may take, never fewer than min_samples."""
    wanted = int(repeat_budget_ms(per_call_ms, device_ms, config) / max(per_call_ms, 1e-3))
    if host_bound(per_call_ms, device_ms, config):
        wanted = max(wanted, config.host_bound_min_samples)
    fitting = config.fresh_inputs_bytes // max(set_bytes, 1)
    return max(config.min_samples, min(config.max_samples, wanted, fitting))


def staged_on_device(input_sets: Sequence[Sequence[object]], output_bytes: int, device: str) -> list | None:
    """Every timed call's inputs on the device before the first of them, when they fit (with a
    device copy of each call's outputs) in half the free memory; else None, and each call's inputs
    go over just before it. Over the bus, a 64 MiB set and its outputs kept the GPU idle for
    milliseconds between timed calls, and a 47 us kernel timed at 154 us on an H100 where the
    eager baseline, timed back to back, came within 2 us of its kernel; staged, 51 us against
    eager's 49. The SM clock stayed at 1980 MHz: any idle spell before a call costs it ~30 us
    (`timed_call_overhead --gaps`), so candidate and baselines must both be timed back to back."""
    if device != "cuda" or not input_sets:
        return None
    needed = sum(nbytes(content) for content in input_sets) + output_bytes * len(input_sets)
    free_bytes, _ = torch.cuda.mem_get_info()
    if needed > free_bytes // 2:
        return None
    return [[map_tensors(lambda tensor: tensor.to(device), value) for value in content] for content in input_sets]


PAGE_BYTES = 4096


def pages_in_place(input_sets: Sequence[Sequence[object]]) -> int:
    """Every host tensor's pages of the timed sets mapped into this process now, before the timed
    loop: each set arrives as shared memory this process has never read, and the loop's first
    read of it (loading the set into a buffer, or its copy to the device when the sets are not
    staged) faulted in every page between the timed calls, where the loop the evaluator measures
    on the reference's worker reads sets already in place (outside_view.LoopCost). (Most of the
    CPU loads' excess, 21 ms over 60 calls against the calibration's 1.9, was the sets dropped
    inside the loop, worker.timed_calls; this removes the page faults that remained, #44.)
    Returns the bytes read."""
    touched = 0
    seen: set[int] = set()
    for content in input_sets:
        for tensor in tensors(content):
            if tensor.device.type != "cpu" or type(tensor) is not torch.Tensor or tensor.numel() == 0:
                continue
            storage = tensor.untyped_storage()
            if storage.data_ptr() in seen or storage.nbytes() == 0:
                continue
            seen.add(storage.data_ptr())
            as_bytes = torch.empty(0, dtype=torch.uint8).set_(storage)
            as_bytes[::PAGE_BYTES].sum()  # one byte of each page: the read faults the page in
            touched += storage.nbytes()
    return touched


class OutputCopies:
    """Device memory for every timed call's output copies, taken in one piece before the first
    timed call. Copies allocated call by call took the blocks the candidate's own temporaries had
    just freed, and its next call went to cudaMalloc inside the timed region: a cuDNN convolution
    followed by an own Triton ReLU timed 0.49 ms on an H100 with 0.10 ms of kernels, where the eager
    baseline, whose outputs are dropped, timed 0.17 ms. An output the reference's sizes did not
    foresee (or that cannot be viewed in the slab) gets a copy of its own."""

    ALIGN_BYTES = 256

    def __init__(self, output_bytes: Sequence[int], calls: int, device: str):
        slot_bytes = sum(self._aligned(nbytes) for nbytes in output_bytes)
        self._slab = torch.empty(slot_bytes * calls, dtype=torch.uint8, device=device)
        if device == "cpu":
            # Its pages in place now, not at each call's copy inside the timed loop (a fresh
            # allocation of this size is untouched memory; on a GPU it is backed when allocated).
            self._slab.fill_(0)
        self._offset = 0

    @classmethod
    def _aligned(cls, nbytes: int) -> int:
        return -(-nbytes // cls.ALIGN_BYTES) * cls.ALIGN_BYTES

    def copy(self, value: torch.Tensor) -> torch.Tensor:
        value = value.detach()
        nbytes = value.numel() * value.element_size()
        if value.layout == torch.strided and self._offset + nbytes <= self._slab.numel():
            try:
                copy = self._slab[self._offset:self._offset + nbytes].view(value.dtype).view(value.shape)
            except RuntimeError:  # a dtype a byte buffer cannot be viewed as
                return value.clone()
            self._offset += self._aligned(nbytes)
            return copy.copy_(value)
        return value.clone()


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
    """Times `fn(*inputs)`; `fn` is the model's forward (or a baseline's).

    The pieces (warm-up, profiled calls, one timed call) are composed two ways: `measure`
    rotates a few content sets through the buffers (synthesis filters, experiments: trusted code);
    the candidate's worker gives every timed call content never seen before, and the baselines
    are timed by its loop (worker.py)."""

    def __init__(self, clock: Clock, config: TimingConfig):
        self.clock = clock
        self.config = config
        flush_bytes = config.l2_flush_bytes if clock.device == "cuda" else config.cpu_flush_bytes
        self._flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.int32, device=clock.device) if flush_bytes else None
        if clock.device == "cuda":
            # Captured before the candidate is imported, like the clock.
            self._flush_stream = torch.cuda.Stream()
            self._marker = torch.empty(1, dtype=torch.int32, device="cuda")
            self._stream_context = torch.cuda.stream
        # Persisting L2 lines would survive the flush: reset before each flushed call, read back
        # after it (l2_persistence.py). Violations wait in `persistence.drain()`.
        self.persistence = persistence_guard(clock.device, clock.timing_stream_handle(), clock.synchronize)

    def flush_cache(self) -> None:
        if self._flush_buffer is not None:
            self._flush_buffer.fill_(0)  # writing more than the cache holds evicts the candidate's data

    def warm_up(self, call_on: Callable[[list[object]], Callable[[], object]], buffers: list[list[object]]) -> float:
        """Every buffer once (first calls compile, autotune, allocate), then by time; returns
        the median call time after the first round."""
        warmup_times = []
        for buffer in buffers:
            self.clock.synchronize()
            warmup_times.append(self.clock.time_call_ms(call_on(buffer))[0])
        warm_start = self.clock.now_ns()
        while (self.clock.now_ns() - warm_start) / 1e6 < self.config.warmup_ms:
            for buffer in buffers:
                warmup_times.append(self.clock.time_call_ms(call_on(buffer))[0])
        return statistics.median(warmup_times[len(buffers):] or warmup_times)

    def profile(self, fn, buffers, run, per_call_ms: float) -> ProfiledCalls | None:
        """Device time on the GPU (None on the CPU or when turned off)."""
        if self.clock.device != "cuda" or not self.config.device_time:
            return None
        return self.device_time(fn, buffers, run, per_call_ms)

    def overlaps_launch(self, profiled: ProfiledCalls | None) -> bool:
        """Whether the host's launch may hide under the flush: only when every profiled kernel
        ran on the timing stream (see TimingConfig.overlap_launch)."""
        return self.config.overlap_launch and profiled is not None and not profiled.other_streams

    def timed_call(self, call: Callable[[], object], overlap: bool) -> tuple[float, object]:
        """One timed call after an L2 flush; the buffer was loaded before. The persisting-L2
        state is reset before it and read back after it (l2_persistence.py)."""
        self.persistence.reset()
        self.flush_cache()
        if not overlap:
            self.clock.synchronize()
        # Else every stream is already idle (the last call ended in a device-wide
        # synchronisation) and the start event waits behind the flush while the host launches.
        elapsed_ms, stream_ms, output = self.clock.time_call_split_ms(call)
        self.persistence.check("timed")
        return call_time_ms(elapsed_ms, stream_ms, overlap, self.config.sync_latency_ms), output

    def measure(self, fn: Callable[..., object], content_sets: Sequence[Sequence[object]]) -> Measurement:
        """`content_sets` are input sets already on the device. Each call gets one of a few
        buffers, refilled with another content set every round (outside the timed region)."""
        sets = len(content_sets)
        buffers = input_buffers(content_sets)

        def call_on(buffer: list[object]) -> Callable[[], object]:
            return lambda: fn(*buffer)

        per_call_ms = self.warm_up(call_on, buffers)
        profiled = self.profile(fn, buffers, lambda call: call(), per_call_ms)
        overlap = self.overlaps_launch(profiled)
        samples: list[float] = []
        final_outputs: list[object] = [None] * sets
        # No collection inside a sample (gc_pause.py), as for the candidate's timed calls.
        with gc_pause.paused(self.config.pause_gc):
            for call_index in range(_sample_count(per_call_ms, self.config, sets)):
                buffer_index, round_index = call_index % sets, call_index // sets
                content_index = (buffer_index + round_index) % sets
                if round_index > 0:
                    load_content(buffers[buffer_index], content_sets[content_index])
                elapsed_ms, output = self.timed_call(call_on(buffers[buffer_index]), overlap)
                samples.append(elapsed_ms)
                final_outputs[content_index] = output
        measurement = Measurement(samples, final_outputs, launch_overlapped=overlap)
        if profiled is not None:
            measurement.device_ms, measurement.device_busy_ms = profiled.device_ms, profiled.busy_ms
            measurement.kernel_names = profiled.kernel_names
        return measurement

    def device_time(self, fn, buffers, run, per_call_ms: float) -> ProfiledCalls:
        """Median over calls of the summed kernel durations the profiler records (and of their
        busy time, the union of their intervals), with the L2 flushed before each call; and
        whether any of the calls' work ran on a stream other than the timing stream.

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
    # Median over calls of the time some kernel was running (the union of their intervals):
    # what a bare call can never beat, however long the gaps between launches were when watched.
    busy_ms: float
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
    per_call, busy = [], []
    for before, after in list(itertools.pairwise(flushes))[skip:]:
        kernels = [event for event in work if before.end_ns() <= event.start_ns() < after.start_ns()]
        per_call.append(sum(event.duration_ns() for event in kernels) / 1e6)
        busy.append(busy_ns([(event.start_ns(), event.end_ns()) for event in kernels]) / 1e6)
    return ProfiledCalls(
        device_ms=statistics.median(per_call) if per_call else 0.0,
        busy_ms=statistics.median(busy) if busy else 0.0,
        kernel_names=sorted({event.name() for event in work}),
        other_streams=any(event.device_resource_id() != timing_stream for event in work),
    )


def busy_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of (start, end) intervals: overlapping kernels count once."""
    total, covered_until = 0, None
    for start, end in sorted(intervals):
        if covered_until is None or start > covered_until:
            total += end - start
            covered_until = end
        elif end > covered_until:
            total += end - covered_until
            covered_until = end
    return total
