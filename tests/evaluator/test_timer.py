"""The timer on the CPU: rotation of input content defeats memoising by buffer address."""

import torch

from pytest_cudaagent.config import TimingConfig
from pytest_cudaagent.timer import Clock, Timer, _sample_count

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


def test_timed_calls_run_bare_unless_auditing_every_call_is_asked_for():
    import dataclasses

    def counting_audit(counter):
        def audit(call):
            counter.append(1)
            return call()
        return audit

    sets = content_sets()
    bare, every = [], []
    measurement = Timer(Clock("cpu"), CONFIG).measure(lambda x: x * 2, sets, audit=counting_audit(bare))
    assert len(bare) == len(sets)  # only the check round
    assert all(torch.equal(out, c[0] * 2) for c, out in zip(sets, measurement.audited_outputs, strict=True))
    audited_config = dataclasses.replace(CONFIG, audit_timed_calls=True)
    measurement = Timer(Clock("cpu"), audited_config).measure(lambda x: x * 2, sets, audit=counting_audit(every))
    assert len(every) >= len(measurement.samples_ms) + len(sets)
