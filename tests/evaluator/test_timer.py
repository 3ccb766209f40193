"""The timer on the CPU: rotation of input content defeats memoising by buffer address."""

import pytest
import torch

from pytest_cudaagent.core.config import TimingConfig
from pytest_cudaagent.timing.timer import Clock, Timer, _sample_count

CONFIG = TimingConfig(warmup_ms=1, repeat_ms=5, min_samples=6, max_samples=30)


def content_sets(count=3):
    return [[torch.randn(128)] for _ in range(count)]


def test_honest_function_returns_the_right_output_for_each_content():
    sets = content_sets()
    measurement = Timer(Clock("cpu"), CONFIG).measure(lambda x: x * 2, sets)
    for content, output in zip(sets, measurement.final_outputs, strict=True):
        assert torch.equal(output, content[0] * 2)
    assert len(measurement.samples_ms) >= CONFIG.min_samples
    assert all(sample >= 0 for sample in measurement.samples_ms)


def test_memo_by_buffer_address_gives_wrong_final_outputs():
    memo = {}

    def cheat(x):
        key = x.data_ptr()
        if key not in memo:
            memo[key] = x * 2
        return memo[key]

    sets = content_sets()
    measurement = Timer(Clock("cpu"), CONFIG).measure(cheat, sets)
    wrong = [not torch.equal(out, content[0] * 2) for content, out in zip(sets, measurement.final_outputs, strict=True)]
    assert all(wrong)


def test_skipping_work_after_some_calls_gives_wrong_final_outputs():
    calls = {"count": 0}

    def lazy(x):
        calls["count"] += 1
        return x * 2 if calls["count"] <= 4 else torch.zeros_like(x)

    sets = content_sets()
    measurement = Timer(Clock("cpu"), CONFIG).measure(lazy, sets)
    assert not any(torch.equal(out, c[0] * 2) for c, out in zip(sets, measurement.final_outputs, strict=True))


def test_sample_count_never_returns_a_buffer_its_first_content_in_the_last_round():
    for per_call_ms in (0.001, 0.5, 3.0, 40.0):
        for sets in (2, 3, 4):
            total = _sample_count(per_call_ms, CONFIG, sets)
            rounds = total // sets
            assert total % sets == 0 and (rounds - 1) % sets != 0


def test_patched_clock_changes_nothing():
    import time

    clock = Clock("cpu")
    original = time.perf_counter_ns
    try:
        time.perf_counter_ns = lambda: 0  # a candidate's patch, after the clock was captured
        elapsed, _ = clock.time_call_ms(lambda: sum(range(200000)))
    finally:
        time.perf_counter_ns = original
    assert elapsed > 0


def test_fresh_call_count_follows_the_budget_and_the_memory_for_fresh_sets():
    import dataclasses

    from pytest_cudaagent.timing.timer import fresh_call_count

    config = dataclasses.replace(CONFIG, repeat_ms=100, min_samples=10, max_samples=1000, fresh_inputs_bytes=1 << 30)
    assert fresh_call_count(1.0, 1 << 10, config) == 100  # the repeat budget decides
    assert fresh_call_count(0.001, 1 << 10, config) == 1000  # capped at max_samples
    assert fresh_call_count(0.01, 64 << 20, config) == 16  # 16 sets of 64 MiB fit in 1 GiB
    assert fresh_call_count(0.01, 512 << 20, config) == 10  # never fewer than min_samples


def test_a_long_host_bound_call_gets_at_least_host_bound_min_samples_where_its_sets_fit():
    """A speedup in rounds divides lower deciles: of eleven 72 ms calls that is one call."""
    import dataclasses

    from pytest_cudaagent.timing.timer import fresh_call_count

    config = dataclasses.replace(CONFIG, repeat_ms=100, host_bound_repeat_ms=1000, host_bound_ratio=1.5,
                                 min_samples=10, max_samples=1000, host_bound_min_samples=30,
                                 fresh_inputs_bytes=1 << 30)
    assert fresh_call_count(72.0, 1 << 10, config, device_ms=40.0) == 30  # host-bound: the floor, not 13
    assert fresh_call_count(72.0, 1 << 10, config, device_ms=70.0) == 10  # device-bound: min_samples
    assert fresh_call_count(72.0, 1 << 10, config) == 10  # no device time (the CPU): never host-bound
    assert fresh_call_count(10.0, 1 << 10, config, device_ms=2.0) == 100  # the budget gives more already
    assert fresh_call_count(72.0, 64 << 20, config, device_ms=40.0) == 16  # only as many fresh sets as fit


def test_busy_time_counts_overlapping_kernels_once():
    from pytest_cudaagent.timing.timer import busy_ns

    assert busy_ns([]) == 0
    assert busy_ns([(0, 10), (20, 30)]) == 20  # a gap is not busy
    assert busy_ns([(0, 10), (5, 15), (12, 20)]) == 20  # overlaps once
    assert busy_ns([(30, 40), (0, 100)]) == 100  # contained, in any order


class FakeKernel:
    """What the profiler gives for one GPU event: stream, start, end (ns), name."""

    def __init__(self, stream, start, end, name="k"):
        self.stream, self.start, self.end, self._name = stream, start, end, name

    def device_resource_id(self):
        return self.stream

    def start_ns(self):
        return self.start

    def end_ns(self):
        return self.end

    def duration_ns(self):
        return self.end - self.start

    def name(self):
        return self._name


def test_profiled_calls_are_split_at_the_flushes_which_are_not_counted():
    from pytest_cudaagent.timing.timer import split_calls

    timing, flush = 3, 7  # the marker names the timing stream, the first flush the flush stream
    events = [
        FakeKernel(timing, 0, 10, "marker"),
        FakeKernel(flush, 20, 100, "fill"),
        FakeKernel(timing, 110, 120, "warm"),  # warm-up call, skipped
        FakeKernel(flush, 130, 140, "fill"),
        FakeKernel(timing, 150, 250, "mine"), FakeKernel(timing, 260, 400, "mine"),  # call 1
        FakeKernel(flush, 450, 550, "fill"),
        FakeKernel(timing, 600, 1600, "mine"),  # call 2
        FakeKernel(flush, 1700, 1800, "fill"),
    ]
    profiled = split_calls(list(reversed(events)), calls=3, skip=1)
    assert profiled.device_ms == (240 / 1e6 + 1000 / 1e6) / 2
    assert profiled.busy_ms == (240 / 1e6 + 1000 / 1e6) / 2  # the idle gap in call 1 is not busy
    assert profiled.kernel_names == ["mine", "warm"]  # neither marker nor flush
    assert profiled.other_streams is False


def test_work_on_another_stream_is_counted_and_reported():
    from pytest_cudaagent.timing.timer import split_calls

    events = [FakeKernel(3, 0, 10), FakeKernel(7, 20, 100), FakeKernel(3, 150, 250, "mine"),
              FakeKernel(9, 200, 400, "side"), FakeKernel(7, 450, 550)]
    profiled = split_calls(events, calls=1)
    assert profiled.device_ms == 300 / 1e6 and profiled.busy_ms == 250 / 1e6
    assert profiled.other_streams is True


def test_split_calls_refuses_when_the_flushes_do_not_frame_every_call():
    import pytest

    from pytest_cudaagent.timing.timer import split_calls

    same_stream = [FakeKernel(0, 0, 100), FakeKernel(0, 150, 250), FakeKernel(0, 300, 400), FakeKernel(0, 500, 600)]
    with pytest.raises(RuntimeError, match="cannot tell the calls apart"):
        split_calls(same_stream, calls=2)


def test_an_overlapped_call_ends_at_its_stream_end_unless_the_device_stayed_busy():
    from pytest_cudaagent.timing.timer import call_time_ms

    # The synchronisation's usual wake-up (~11 us) is left out...
    assert call_time_ms(0.201, 0.190, overlapped=True, sync_latency_ms=0.05) == 0.190
    # ...but a device busy well after the stream's end (work on other streams) counts in full.
    assert call_time_ms(0.400, 0.190, overlapped=True, sync_latency_ms=0.05) == 0.400
    # Without the overlap (side streams seen, or --count-launch) the synchronised end counts.
    assert call_time_ms(0.201, 0.190, overlapped=False, sync_latency_ms=0.05) == 0.201
    assert call_time_ms(0.201, None, overlapped=True, sync_latency_ms=0.05) == 0.201  # the CPU


# -- the CPU backend: no flush by default, the eager baseline timed by the candidate's loop (#40) --


def test_the_cpu_flush_writes_only_where_configured():
    flushed = Timer(Clock("cpu"), TimingConfig(cpu_flush_bytes=1 << 20))
    assert flushed._flush_buffer.numel() * 4 == 1 << 20
    flushed._flush_buffer.fill_(7)
    flushed.flush_cache()
    assert int(flushed._flush_buffer.max()) == 0
    unflushed = Timer(Clock("cpu"), TimingConfig())
    assert TimingConfig().cpu_flush_bytes == 0 and unflushed._flush_buffer is None
    unflushed.flush_cache()  # nothing to write, and no error


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_baseline_is_timed_by_the_candidates_loop(device):
    """Each timed call is seeded and finds the previous call's output dropped (copied into the
    slab), as the candidate's calls do (worker.timed_calls); as many calls as the candidate gets
    (fresh_call_count). On the CPU every timed call gets inputs no other call had, drawn by the
    problem's get_inputs under a fresh seed (a core's branch predictor learns three sets called
    in turn); on the GPU the warm-up sets in turn, staged on the device before the first call,
    and the device-time profile runs before them (#40: the same loop on both sides)."""
    import types
    import weakref

    from pytest_cudaagent.timing.timer import fresh_call_count
    from pytest_cudaagent.workers.worker import ReferenceServer

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    # The drawn sets live on the host (shared memory), as the reference's worker draws them.
    sets = [{"inputs": [torch.randn(64)], "outputs": [torch.randn(64)], "seed": 1000 + index} for index in range(3)]
    calls = []  # (the seed the call ran under, whether the previous call's output was alive, the input's device, its content)
    last = [lambda: None]

    def fn(x):
        calls.append((torch.initial_seed(), last[0]() is not None, x.device.type, tuple(x[:4].tolist())))
        out = x * 2
        last[0] = weakref.ref(out)
        return out

    server = ReferenceServer.__new__(ReferenceServer)
    server.sets, server.device, server.inputs_on_device = sets, device, False
    server.problem = types.SimpleNamespace(get_inputs=lambda: [torch.randn(64)])
    timer = Timer(Clock(device), CONFIG)
    measurement = ReferenceServer.timed_as_the_candidate(server, timer, fn, [0, 1, 2])
    timed = calls[-len(measurement.samples_ms):]
    set_bytes = 2 * 64 * 4
    assert CONFIG.min_samples <= len(measurement.samples_ms) <= fresh_call_count(1e-3, set_bytes, CONFIG)
    assert not any(alive for _, alive, _, _ in timed[1:]), timed
    assert {where for _, _, where, _ in timed} == {device}
    warm_contents = {tuple(drawn["inputs"][0][:4].tolist()) for drawn in sets}
    if device == "cpu":
        seeds, contents = [seed for seed, *_ in timed], [content for *_, content in timed]
        assert len(set(seeds)) == len(seeds) and not set(seeds) & {1000, 1001, 1002}
        assert len(set(contents)) == len(contents) and not set(contents) & warm_contents
    else:
        assert [seed for seed, *_ in timed] == [1000 + index % 3 for index in range(len(timed))]
        assert {content for *_, content in timed} <= warm_contents
        assert measurement.device_ms is not None and measurement.device_ms > 0
