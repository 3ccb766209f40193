"""Cores kept for the timed process (host_quiet.py): while a process holds the timing lock it alone
of the run's processes is on the reserved cores; the others never are; a holder that dies leaves
nothing to restore; timed calls and the eager baseline of a real evaluation run there."""

import dataclasses
import multiprocessing
import os
import signal

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.timing import host_quiet
from pytest_cudaagent.timing.host_quiet import (
    HOST_ENV,
    HostPlan,
    automatic_count,
    device_slot,
    record_host,
    reserved_in,
)
from pytest_cudaagent.timing.locks import device_lock
from tests.evaluator.host_quiet import targets
from tests.helpers import QUICK_TIMING, cpu_config

HERE = os.path.dirname(__file__)
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="a reservation needs a core for untimed work beside it")


def _siblings(tmp_path, groups):
    """A fake /sys/devices/system/cpu with these hardware-thread groups."""
    for group in groups:
        for cpu in group:
            topology = tmp_path / f"cpu{cpu}" / "topology"
            topology.mkdir(parents=True)
            topology.joinpath("thread_siblings_list").write_text(",".join(map(str, group)) + "\n")
    return tmp_path


def test_reserved_cpus_are_whole_cores_from_the_top_one_block_per_gpu(tmp_path, monkeypatch):
    # 8 cores of two hardware threads each: CPU n and n + 8 share a core.
    monkeypatch.setattr(host_quiet, "TOPOLOGY", _siblings(tmp_path, [(n, n + 8) for n in range(8)]))
    plan = HostPlan(tuple(range(16)), ("0", "1"))
    assert plan.reserved(0, 2) == {7, 15}  # two logical CPUs: one whole core
    assert plan.reserved(1, 2) == {6, 14}
    assert plan.reserved(0, 3) == {6, 7, 14, 15}  # rounded up to whole cores
    assert plan.untimed(2) == set(range(16)) - {6, 7, 14, 15}
    assert plan.reserved(0, 0) == set() and plan.untimed(0) == set(range(16))


def test_a_small_machine_keeps_a_core_for_untimed_work(tmp_path, monkeypatch):
    monkeypatch.setattr(host_quiet, "TOPOLOGY", tmp_path)  # no topology: each CPU its own core
    # Unless asked, none below four cores: half of a 2-core machine costs its builds more than
    # a quiet core buys the timings.
    assert [automatic_count(cores) for cores in (1, 2, 3, 4, 7, 8, 16)] == [0, 0, 0, 1, 1, 2, 2]
    assert HostPlan((0, 1), ()).reserved(0, None) == set()
    assert HostPlan(tuple(range(4)), ()).reserved(0, None) == {3}
    assert HostPlan(tuple(range(16)), ("0",)).reserved(0, None) == {14, 15}
    assert HostPlan((0, 1), ()).reserved(0, 2) == {1}
    assert HostPlan((0, 1), ()).untimed(2) == {0}
    assert HostPlan((0,), ()).reserved(0, 2) == set()  # nothing left for the rest: no reservation
    assert HostPlan((0,), ()).untimed(2) == {0}
    assert HostPlan((0, 1, 2), ("0", "1", "2")).reserved(2, 2) == set()  # a core per GPU leaves none


def test_the_plan_is_made_once_and_every_process_reads_the_same(monkeypatch):
    monkeypatch.delenv(HOST_ENV, raising=False)
    plan = record_host(gpus=["0", "1"])
    assert plan.cpus == tuple(sorted(os.sched_getaffinity(0))) and plan.gpus == ("0", "1")
    assert os.environ[HOST_ENV]
    # A worker whose own CPUs were narrowed still reads the run's plan, not its own mask.
    assert record_host(gpus=["7"]) == plan
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert device_slot("cuda", plan) == 1 and device_slot("cpu", plan) == 0


def test_a_run_without_timing_reserves_nothing():
    assert reserved_in({"config": EvalConfig(timing=False).to_dict()}) == 0
    assert reserved_in({"config": EvalConfig().to_dict()}) is None  # the machine's own
    assert reserved_in({}) is None  # a worker without an EvalConfig (compile tools): the default
    timing = dataclasses.replace(QUICK_TIMING, reserved_cpus=3)
    assert reserved_in({"config": EvalConfig(timing_config=timing).to_dict()}) == 3
    assert reserved_in({"config": {"timing": {"reserved_cpus": 1}}}) == 1  # a synthesis FilterConfig


@pytest.fixture
def run_env(tmp_path, monkeypatch):
    """A run of our own: its plan (this process's CPUs) and timing locks, inherited by spawned children."""
    monkeypatch.setenv(HOST_ENV, f"{','.join(map(str, CPUS))}|")
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path))
    plan = record_host()
    return plan.reserved(0, 1), plan.untimed(1)


def _start(target, *args):
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=target, args=(theirs, *args), daemon=True)
    process.start()
    return process, ours


def _ask(conn):
    conn.send("cpus")
    assert conn.poll(60)
    return conn.recv()


@needs_two_cpus
def test_while_a_timing_holds_the_lock_it_alone_is_on_the_reserved_cores(run_env):
    reserved, untimed = run_env
    others = [_start(targets.untimed, 1) for _ in range(2)]
    holder, conn = _start(targets.holder, 1)
    try:
        assert conn.poll(60)
        assert conn.recv() == ("untimed", untimed)
        assert conn.poll(60)
        state, held_cpus, threads, child = conn.recv()
        assert state == "held" and held_cpus == reserved
        assert threads == len(reserved)  # the CPU backend's intra-op threads fit the reserved cores
        for _, other in others:
            assert _ask(other) == untimed  # no thread of another worker on the reserved cores
        conn.send("release")
        assert conn.poll(60)
        state, released_cpus, child_cpus = conn.recv()
        # Back with the others, and so is the process it started while holding.
        assert state == "released" and released_cpus == untimed and child_cpus == untimed
        conn.send("exit")
    finally:
        for process, other in others:
            other.send("exit")
            process.join(10)
        holder.join(10)


@needs_two_cpus
def test_a_holder_that_dies_leaves_the_others_off_the_cores_and_the_lock_to_the_next(run_env):
    reserved, untimed = run_env
    other, other_conn = _start(targets.untimed, 1)
    first, conn = _start(targets.holder, 1)
    try:
        assert conn.poll(60) and conn.recv()[0] == "untimed"
        assert conn.poll(60)
        _, held_cpus, _, child = conn.recv()
        assert held_cpus == reserved
        os.kill(first.pid, signal.SIGKILL)  # dies holding the lock
        os.kill(child, signal.SIGKILL)
        first.join(10)
        assert _ask(other_conn) == untimed  # nothing of it to undo
        second, conn = _start(targets.holder, 1)
        assert conn.poll(60) and conn.recv()[0] == "untimed"
        assert conn.poll(60)
        _, held_cpus, _, child = conn.recv()
        assert held_cpus == reserved  # the lock died with the holder; the cores are the next one's
        conn.send("release")
        assert conn.poll(60) and conn.recv()[1] == untimed
        conn.send("exit")
        second.join(10)
    finally:
        other_conn.send("exit")
        other.join(10)


@needs_two_cpus
def test_a_lock_held_on_a_workers_behalf_moves_that_worker_and_its_threads_fit(run_env, own_cpus_kept):
    """The evaluating process holds the lock for a candidate's worker (#44, locks.device_lock's
    on_behalf_of): the worker, not the holder, is on the reserved cores for the hold, and back
    after; the worker fits its own torch threads to them (host_quiet.fit_timed_threads)."""
    reserved, untimed = run_env
    host_quiet.untimed_worker(1)
    worker, conn = _start(targets.timed_by_another, 1)
    try:
        assert _ask(conn) == untimed
        with device_lock("cpu", on_behalf_of=worker.pid):
            assert _ask(conn) == reserved
            assert os.sched_getaffinity(0) == untimed  # the holder stays off them
            conn.send("fit")
            assert conn.poll(60) and conn.recv() == len(reserved)
        assert _ask(conn) == untimed
    finally:
        conn.send("exit")
        worker.join(10)


@pytest.fixture
def own_cpus_kept():
    """An evaluation with a reservation moves this process (it starts workers) off the reserved
    cores for good: put its threads back for the tests that follow in it."""
    count = host_quiet._reserved_here["count"]
    yield
    host_quiet.move_threads([os.getpid()], CPUS)
    host_quiet._reserved_here["count"] = count


@needs_two_cpus
def test_timed_calls_and_the_eager_baseline_run_on_the_reserved_cores(tmp_path, own_cpus_kept):
    """The probe problem and candidate sleep 50 ms per call on the cores they were built on (the
    untimed ones): timed on the reserved cores, neither median comes near that; without a
    reservation both do (the probes work)."""
    problem, candidate = os.path.join(HERE, "host_quiet", "problem.py"), os.path.join(HERE, "host_quiet", "candidate.py")

    def timed(reserved_cpus: int):
        timing = dataclasses.replace(QUICK_TIMING, reserved_cpus=reserved_cpus)
        result = evaluate(problem, candidate, cpu_config(policy="calibration", timing=True, baselines=("eager",),
                                                         timing_config=timing, cache_dir=tmp_path / str(reserved_cpus)))
        assert result.passed, result.summary()
        return result.timing["candidate"].median_ms, result.timing["eager"].median_ms

    candidate_ms, eager_ms = timed(1)
    assert candidate_ms < 25 and eager_ms < 25, (candidate_ms, eager_ms)
    candidate_ms, eager_ms = timed(0)
    assert candidate_ms >= 50 and eager_ms >= 50, (candidate_ms, eager_ms)


@needs_two_cpus
def test_without_a_reservation_a_pinned_process_stays_pinned(run_env, own_cpus_kept):
    """No reservation (0, or a machine too small for one): untimed_worker and the hold leave the
    process's CPUs alone, a pinning of the user's included."""
    os.sched_setaffinity(0, {CPUS[0]})
    host_quiet.untimed_worker(0)
    with host_quiet.timed_hold("cpu"):
        assert os.sched_getaffinity(0) == {CPUS[0]}
    host_quiet.untimed_worker(None)  # automatic: nothing on a machine under four cores
    if host_quiet.automatic_count(len(CPUS)) == 0:
        assert os.sched_getaffinity(0) == {CPUS[0]}


def _two_cores():
    """Two of this process's CPUs on different physical cores (a plan too small for a
    reservation, as the 2-core box is), or None where there are no two."""
    cores = host_quiet._cores(tuple(CPUS), host_quiet.TOPOLOGY)
    return [cores[0][0], cores[-1][0]] if len(cores) > 1 else None


@pytest.fixture
def small_run(tmp_path, monkeypatch, own_cpus_kept):
    """A run whose plan is two CPUs of two cores: no reservation (automatic_count), so the CPU
    backend's timings share one CPU (host_quiet.timing_cpus)."""
    cpus = _two_cores()
    if cpus is None:
        pytest.skip("needs two physical cores")
    monkeypatch.setenv(HOST_ENV, f"{cpus[0]},{cpus[1]}|")
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path))
    os.sched_setaffinity(0, set(cpus))
    return set(cpus)


def test_without_a_reservation_the_cpu_backends_timings_share_one_cpu(small_run):
    """#40: on the 2-core box an identity candidate's 25 us call read 0.74-1.16x of eager with
    its process and eager's each where the scheduler put them, 0.98-1.02x with both on one CPU.
    Every hold of the CPU backend puts its timed process on the same CPU (the top core's), with
    torch's threads fitted to it, and back on all of the run's after; nothing is reserved, so
    untimed work keeps every CPU; the GPU backend and reserved_cpus 0 move nothing."""
    import torch

    top = max(small_run)
    assert host_quiet.timing_cpus("cpu", None) == {top} == host_quiet.timing_cpus("cpu", None)
    assert not host_quiet.reserves_cores("cpu", None)  # untimed work is not kept off it
    assert record_host().untimed(None) == small_run
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        host_quiet.untimed_worker(None)
        assert os.sched_getaffinity(0) == small_run
        with host_quiet.timed_hold("cpu"):
            assert os.sched_getaffinity(0) == {top}
            assert torch.get_num_threads() == 1
        assert os.sched_getaffinity(0) == small_run and torch.get_num_threads() == 2
        for device, count in (("cuda", None), ("cpu", 0)):
            assert host_quiet.timing_cpus(device, count) == set()
            with host_quiet.timed_hold(device, count):
                assert os.sched_getaffinity(0) == small_run
    finally:
        torch.set_num_threads(threads)  # the tests that follow in this process get their own


def test_a_candidates_worker_timed_on_its_behalf_shares_the_same_cpu(small_run):
    """The evaluating process holds the lock for a candidate's worker: the worker and its
    threads go onto the shared timing CPU for the hold, fit torch's threads to it, and are back
    on both CPUs after; the holder stays where it was."""
    top = max(small_run)
    host_quiet.untimed_worker(None)
    worker, conn = _start(targets.timed_by_another, None)
    try:
        assert _ask(conn) == small_run
        with device_lock("cpu", on_behalf_of=worker.pid):
            assert _ask(conn) == {top}
            assert os.sched_getaffinity(0) == small_run
            conn.send("fit")
            assert conn.poll(60) and conn.recv() == 1
        assert _ask(conn) == small_run
    finally:
        conn.send("exit")
        worker.join(10)
