"""The loop around the timed calls costs the candidate's worker what it costs the calibration loop
on the reference's worker (#44: honest candidates flagged `timing_unaccounted` because the
candidate's loop did work the calibration's never does), and where it spent its time is reported
per step (Result.env["timed_loop"]) for diagnosing a verdict, never trusted in one."""

from __future__ import annotations

import dataclasses
import resource

import pytest
import torch

from pytest_cudaagent import evaluate
from pytest_cudaagent.core.shared_tensors import shared_copy
from pytest_cudaagent.evaluation import _step_times
from pytest_cudaagent.timing.timer import PAGE_BYTES, OutputCopies, pages_in_place
from pytest_cudaagent.workers.worker import LOOP_STEPS, timed_calls
from tests.helpers import DATA, TEST_PROBLEMS, cpu_config

PROBLEM = TEST_PROBLEMS / "small_leaky_relu.py"
CANDIDATE = DATA / "candidates" / "pytorch_leaky_relu.py"
MIB = 1024 * 1024


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _faults_reading(tensor: torch.Tensor) -> int:
    buffer = torch.empty_like(tensor).fill_(0)  # its own pages first: only the read is counted
    before = _minor_faults()
    buffer.copy_(tensor)
    return _minor_faults() - before


def _make_ones(count: int, numel: int) -> list[torch.Tensor]:
    return [torch.ones(numel) for _ in range(count)]


def _fresh_shared(count: int, nbytes: int) -> list[torch.Tensor]:
    """Sets' tensors as a worker receives them: shared memory made by another process, whose pages
    are not yet mapped in this one."""
    import torch.multiprocessing as multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_make_ones, (count, nbytes // 4))


def test_pages_in_place_maps_a_fresh_sets_pages_before_the_loop_reads_them():
    received, again = _fresh_shared(2, 8 * MIB)
    faults_without = _faults_reading(received)
    # What the loop paid: a fault per page, or per fault-around window (16 pages of shared memory).
    assert faults_without > (8 * MIB // PAGE_BYTES) // 32, faults_without
    written_here = shared_copy(torch.ones(8 * MIB // 4))
    assert pages_in_place([[again], [written_here]]) == 16 * MIB
    assert _faults_reading(again) < faults_without // 8, faults_without


def test_pages_in_place_reads_nested_tensors_once_per_storage_and_skips_device_and_empty():
    base = torch.zeros(4 * MIB // 4)
    nested = [[{"a": base, "b": base[10:]}, (torch.empty(0),)], [7, "text"]]
    assert pages_in_place(nested) == 4 * MIB


def test_cpu_output_copies_slab_is_in_place_before_the_first_copy():
    slab = OutputCopies([8 * MIB], calls=2, device="cpu")
    output = torch.ones(8 * MIB // 4)
    before = _minor_faults()
    slab.copy(output)
    slab.copy(output)
    assert _minor_faults() - before < 64


class _CountingTimer:
    """Stands in for timer.Timer: a call that returns its buffer's first input, timed by the host
    clock."""

    class clock:
        last_span_ns = (0, 0)

    def timed_call(self, call, overlap):
        import time

        start = time.perf_counter_ns()
        output = call()
        self.clock.last_span_ns = (start, time.perf_counter_ns())
        return 0.0, output


def test_timed_calls_keep_their_sets_and_report_each_step():
    """The sets are dropped by the caller after its reply: one dropped inside the loop unmapped its
    shared memory between two timed calls, which the calibration loop (over sets it keeps) never
    does (3x its loads on the CPU)."""
    sets = [[torch.full((4,), float(index))] for index in range(3)]
    kept = list(sets)
    buffers = [[torch.zeros(4)]]
    loop = timed_calls(_CountingTimer(), lambda buffer: lambda: buffer[0] * 2, buffers, sets, [1, 2, 3],
                       overlap=False, device="cpu")
    assert [s[0] for s in sets] == [s[0] for s in kept]  # every set still held
    assert [out[0][0].item() for out in loop["outputs"]] == [0.0, 2.0, 4.0]
    assert set(loop["steps_ms"]) == set(LOOP_STEPS)
    assert all(ms >= 0 for ms in loop["steps_ms"].values())


class _FaultCountingTimer(_CountingTimer):
    """Counts the page faults inside each timed call."""

    def __init__(self):
        self.faults: list[int] = []

    def timed_call(self, call, overlap):
        before = _minor_faults()
        elapsed_ms, output = super().timed_call(call, overlap)
        self.faults.append(_minor_faults() - before)
        return elapsed_ms, output


_CONV_LOOP = """
import resource, sys, torch
from pytest_cudaagent.timing.timer import OutputCopies
from pytest_cudaagent.workers import worker

if sys.argv[1] == "kept":
    worker.keep_freed_memory()
faults = []

class Timer:
    class clock:
        last_span_ns = (0, 0)

    def timed_call(self, call, overlap):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        output = call()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return 0.0, output

torch.set_num_threads(2)
conv = torch.nn.Conv2d(64, 128, 3, padding=1).eval()
sets = [[torch.randn(16, 64, 56, 56)] for _ in range(10)]
buffers = [[torch.zeros(16, 64, 56, 56)] for _ in range(2)]
with torch.no_grad():
    worker.timed_calls(Timer(), lambda buffer: lambda: torch.relu(conv(buffer[0])), buffers, sets, list(range(10)),
                       overlap=False, device="cpu", copies=OutputCopies([16 * 128 * 56 * 56 * 4], 10, "cpu"))
print(faults)
"""


def _conv_loop_faults(mode: str) -> list[int]:
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _CONV_LOOP, mode], capture_output=True, text=True, timeout=600,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_convolutions_timed_calls_fault_no_pages_once_warm_with_freed_memory_kept():
    """conv3x3_relu's identity candidate timed 0.79-0.81x of eager on the CPU (#40): glibc gave
    its freed output and temporaries back to the kernel, and every timed call faulted 61 MB in
    again (15720 faults a call), where the eager baseline's process did not. Each worker keeps
    what it frees (worker.keep_freed_memory): most warm calls fault nothing. (A fresh interpreter
    each: the C library's thresholds are the process's.)"""
    kept = _conv_loop_faults("kept")[4:]
    assert sum(count < 64 for count in kept) >= len(kept) // 2, kept


def test_every_worker_keeps_its_freed_memory(monkeypatch):
    from pytest_cudaagent.workers import worker

    called = []
    monkeypatch.setattr(worker, "keep_freed_memory", lambda: called.append(1))
    monkeypatch.setattr("pytest_cudaagent.workers.channel.redirect_stdio", lambda path: None)
    monkeypatch.setattr("pytest_cudaagent.timing.host_quiet.untimed_worker", lambda reserved: None)
    # cupti_teardown off: setup_worker would otherwise set TEARDOWN_CUPTI in this test process's
    # environment, which later workers inherit (a test of that switch then saw it set).
    worker.setup_worker({"log_path": "/dev/null", "env": {}, "config": {"timing_config": {"cupti_teardown": False}}})
    assert called == [1]


def test_step_times_from_a_worker_are_numbers_or_dropped():
    assert _step_times(None) is None
    assert _step_times("1.0") is None
    forged = {"load": 1.23456, "seed": "fast", "copy": float("nan"), "x" * 100: 2, "flag": True}
    assert _step_times(forged) == {"load": 1.2346, "x" * 40: 2.0}


@pytest.mark.parametrize("sandbox", [True, False])
def test_result_reports_the_loops_steps_beside_the_calibrations(sandbox):
    config = dataclasses.replace(cpu_config(timing=True, policy="permissive"), sandbox=sandbox)
    per_calls = []
    # Up to three evaluations: a fault in the loop (a set dropped or faulted in inside it) costs
    # 3-10x in every one; one stall of a loaded 2-core box (CI's two test workers) costs one run
    # (8.1 ms a call against 0.12 once, in a full CI run; the same test alone passes).
    for _ in range(3):
        result = evaluate(PROBLEM, CANDIDATE, config)
        assert result.passed, result.summary()
        # The last timed request is the one timed (an earlier one a loaded box stalled is timed again).
        assert len(result.env["timed_loop"]) == 1 + len(result.env.get("timed_again", [])), result.env
        entry = result.env["timed_loop"][-1]
        assert entry["staged"] is False  # the CPU never stages
        assert entry["calls"] == result.timing["candidate"].samples
        assert entry["calibration_calls"] == max(2, min(entry["calls"], config.timing_config.loop_cost_calls))
        for side in ("candidate_steps_ms", "calibration_steps_ms"):
            assert set(LOOP_STEPS) <= set(entry[side]), entry
        candidate, calibration = entry["candidate_steps_ms"], entry["calibration_steps_ms"]
        # The sets' loads cost the candidate's loop what they cost the calibration's, per call.
        per_call = candidate["load"] / entry["calls"], calibration["load"] / entry["calibration_calls"]
        per_calls.append(per_call)
        if per_call[0] < 4 * per_call[1] + 0.05:
            break
    else:
        pytest.fail(f"the candidate's loads cost over 4x the calibration's in three runs: {per_calls}")


# -- the garbage collector kept out of timed work (timing/gc_pause.py) -----------------------------

GARBAGE = DATA / "candidates" / "cyclic_garbage_leaky_relu.py"


@pytest.mark.parametrize("pause_gc", [True, False])
def test_no_collection_runs_inside_the_candidates_timed_request(pause_gc):
    """A forward that leaves cycles behind (4000 objects a call) triggers collections wherever the
    collector is on; paused, none runs from the staging to the audit (the worker's own count,
    Result.env["timed_loop"]), and every cycle is still collected after."""
    timing = dataclasses.replace(cpu_config().timing_config, pause_gc=pause_gc)
    result = evaluate(PROBLEM, GARBAGE, cpu_config(timing=True, policy="permissive", timing_config=timing))
    assert result.passed, result.summary()
    # One entry per timed request: a collection inside the loop (collector on) or a stall of a
    # loaded box can make a request one the evaluator's view does not account for; it is timed
    # again (timed_again), and every request is held to the same count.
    entries = result.env["timed_loop"]
    assert len(entries) == 1 + len(result.env.get("timed_again", [])), result.env
    collections = sum(entry["handler_gc"]["collections"] + entry["after_time_gc"]["collections"] for entry in entries)
    if pause_gc:
        assert collections == 0, entries
    else:
        assert collections > 0, entries  # the candidate makes the garbage the test relies on


def test_gc_paused_collects_first_and_restores_the_collector():
    import gc

    from pytest_cudaagent.timing import gc_pause

    watch = gc_pause.GcWatch().install()
    try:
        mark = watch.mark()
        assert gc.isenabled()
        with gc_pause.paused():
            assert not gc.isenabled()
            assert watch.since(mark)["collections"] == 1  # the collection before the block
        assert gc.isenabled()
        with gc_pause.paused(enabled=False):
            assert gc.isenabled()
        gc.disable()
        with gc_pause.paused():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
        gc.callbacks.remove(watch._callback)


def test_a_requests_arguments_are_freed_before_its_reply_goes():
    """A "stage" request's sets (gigabytes of shared memory, once staged on the device) were freed
    only when the next request arrived: their unmapping ran after the "time" request came in,
    inside the evaluator's clock of it (36-355 ms before the handler began on the H200)."""
    import weakref

    from pytest_cudaagent.workers.worker import serve_requests

    class Sets:
        pass

    sets = Sets()
    alive_at_reply = []

    class Conn:
        def __init__(self, requests):
            self.requests = requests

        def recv(self):
            return self.requests.pop(0)

        def send(self, reply):
            alive_at_reply.append(watched() is not None)

    watched = weakref.ref(sets)
    conn = Conn([("stage", sets), ("exit",)])
    del sets
    serve_requests(conn, {"stage": lambda sets: {"staged": True}})
    assert alive_at_reply == [False]
