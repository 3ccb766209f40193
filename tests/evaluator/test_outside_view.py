"""The evaluating process's own view of a candidate's timed calls (outside_view.py): the worker's
clock readings against its own clock, the time outside the samples against what the loop costs,
and the CPU of threads the candidate started."""

import os
import threading
import time

from pytest_cudaagent.rules import outside_view
from pytest_cudaagent.rules.outside_view import LoopCost, Snapshot

MS = 1_000_000


def calls(count: int, start: int, call_ns: int, gap_ns: int) -> tuple[list[float], list[list[int]]]:
    """Honest samples and stamps: `count` calls of `call_ns` each, `gap_ns` apart."""
    stamps = [[start + i * (call_ns + gap_ns), start + i * (call_ns + gap_ns) + call_ns] for i in range(count)]
    return [(end - begin) / 1e6 for begin, end in stamps], stamps


def test_true_readings_fit_and_every_kind_of_false_one_is_named():
    samples, stamps = calls(5, 1_000 * MS, 2 * MS, 3 * MS)
    window = (999 * MS, 1_030 * MS)
    assert outside_view.stamps_problem(window, 5, samples, stamps, "cpu") is None
    slow = [[begin // 20, end // 20] for begin, end in stamps]  # a clock 20 times slow
    assert "outside the request" in outside_view.stamps_problem(window, 5, samples, slow, "cpu")
    swapped = [stamps[1], stamps[0], *stamps[2:]]
    assert "out of order" in outside_view.stamps_problem(window, 5, samples, swapped, "cpu")
    halved = [sample / 2 for sample in samples]  # samples rewritten, readings left alone
    assert "clock readings are" in outside_view.stamps_problem(window, 5, halved, stamps, "cpu")
    assert outside_view.stamps_problem(window, 5, halved, stamps, "cuda") is None  # events may leave host time out
    longer = [sample * 2 for sample in samples]
    assert "longer than" in outside_view.stamps_problem(window, 5, longer, stamps, "cuda")
    assert "did not send 5 durations" in outside_view.stamps_problem(window, 5, samples[:4], stamps, "cpu")
    assert "did not send 5 durations" in outside_view.stamps_problem(window, 5, ["1"] * 5, stamps, "cpu")
    assert "not two integers" in outside_view.stamps_problem(window, 5, samples, [[1.5, 2.5]] * 5, "cpu")


def test_the_loop_cost_comes_from_the_trusted_calls_gaps_and_the_request_around_them():
    samples, stamps = calls(4, 100 * MS, 0, 2 * MS)  # calls that do nothing, 2 ms apart
    cost = outside_view.wall_loop_cost((99 * MS, 108 * MS), samples, stamps)
    assert cost.per_call_ns == 2 * MS and cost.fixed_ns == 9 * MS - 3 * 2 * MS
    assert outside_view.cpu_loop_cost(8 * MS, 4) == LoopCost(2 * MS, 0.0)


def test_the_workers_cleanup_after_its_loop_is_not_the_loops_cost():
    """The reference's worker gives its device memory back after the loop (cudaFree of its staged
    sets: up to seconds), inside the request this process timed: cut at the loop's end, or a
    slowed clock hides behind an allowance of that size (139 ms behind 156 on the H200)."""
    samples, stamps = calls(4, 100 * MS, 0, 2 * MS)
    cost = outside_view.wall_loop_cost((99 * MS, 608 * MS), samples, stamps, loop_end_ns=108 * MS)
    assert cost.fixed_ns == 9 * MS - 3 * 2 * MS
    # A loop end the window does not contain is not believed.
    uncut = outside_view.wall_loop_cost((99 * MS, 108 * MS), samples, stamps, loop_end_ns=200 * MS)
    assert uncut.fixed_ns == 9 * MS - 3 * 2 * MS


def snapshots(serving: int, before: dict, after: dict, inner: dict, cpu: tuple[int, int] = (0, 0)) -> tuple:
    return Snapshot(serving, before, dict(inner), cpu[0]), Snapshot(serving, after, dict(inner), cpu[1])


def test_time_outside_the_samples_is_held_to_the_loops_cost():
    before, after = snapshots(10, {(10, 10): 0}, {(10, 10): 40 * MS}, {10: 1})
    samples = [3.0] * 10  # 30 ms of calls
    honest = outside_view.account("cpu", (0, 500 * MS), before, after, samples, LoopCost(1 * MS, 0.0), 3.0, 5.0)
    assert honest.unaccounted_ms == 10.0 and honest.allowed_ms == 35.0 and honest.wall_ms == 500.0
    assert outside_view.unaccounted_violation(honest, "cpu") is None
    # The same CPU time with the calls reported 20 times shorter: the rest was used between them.
    lying = outside_view.account("cpu", (0, 500 * MS), before, after, [0.15] * 10, LoopCost(1 * MS, 0.0), 3.0, 5.0)
    violation = outside_view.unaccounted_violation(lying, "cpu")
    assert violation.rule == "timing_unaccounted" and "thread used 40.000 ms of CPU" in violation.detail
    # On the GPU the basis is this process's own clock.
    gpu = outside_view.account("cuda", (0, 100 * MS), before, after, [1.0] * 10, LoopCost(2 * MS, 5 * MS), 3.0, 5.0)
    assert gpu.unaccounted_ms == 90.0 and gpu.allowed_ms == 80.0
    assert "own clock saw 100.000 ms" in outside_view.unaccounted_violation(gpu, "cuda").detail


def test_on_the_gpu_time_the_serving_thread_spent_preempted_is_not_the_candidates():
    # An honest loop on a loaded host: 30 ms of its 100 ms wall the serving thread was runnable
    # but another process had its CPU (schedstat's wait); that is not work hidden between calls.
    before, after = snapshots(10, {(10, 10): 0}, {(10, 10): 20 * MS}, {10: 1})
    before.serving_wait_ns, after.serving_wait_ns = 5 * MS, 35 * MS
    loaded = outside_view.account("cuda", (0, 100 * MS), before, after, [1.0] * 10, LoopCost(2 * MS, 5 * MS), 3.0, 5.0)
    assert loaded.preempted_ms == 30.0 and loaded.unaccounted_ms == 60.0 and loaded.allowed_ms == 80.0
    assert outside_view.unaccounted_violation(loaded, "cuda") is None
    # A clock that lies still shows: 20 calls reported at 0.1 ms over 400 ms of wall, 30 ms preempted.
    lying = outside_view.account("cuda", (0, 400 * MS), before, after, [0.1] * 20, LoopCost(2 * MS, 5 * MS), 3.0, 5.0)
    violation = outside_view.unaccounted_violation(lying, "cuda")
    assert violation.rule == "timing_unaccounted" and "30.000 ms of it preempted, left out" in violation.detail
    # On the CPU the basis is CPU time, which a preempted thread does not use: nothing is left out.
    cpu = outside_view.account("cpu", (0, 100 * MS), before, after, [1.0] * 10, LoopCost(2 * MS, 5 * MS), 3.0, 5.0)
    assert cpu.preempted_ms == 0.0 and cpu.unaccounted_ms == 10.0


def test_a_snapshot_reads_the_serving_threads_runqueue_wait():
    import os

    taken = outside_view.snapshot(os.getpid(), with_tree=False)
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat") as schedstat:
        now = int(schedstat.read().split()[1])
    assert 0 <= taken.serving_wait_ns <= now


def test_threads_that_existed_before_the_candidate_and_idle_ones_are_never_held_against_it():
    # (pid, host tid) -> CPU ns; host tid 11 is the harness's (inner tid 2), 12 the candidate's.
    before, after = snapshots(10, {(10, 10): 0, (10, 11): 0, (10, 12): 0},
                              {(10, 10): 50 * MS, (10, 11): 400 * MS, (10, 12): 0}, {10: 1, 11: 2, 12: 3},
                              cpu=(0, 450 * MS))
    used, violation = outside_view.new_threads_violation(before, after, {1, 2}, 30 * MS, 10, 5.0, 0.5)
    assert used == 0.0 and violation is None


def test_a_new_thread_busier_than_the_calls_lasted_is_a_background_thread():
    before, after = snapshots(10, {(10, 10): 0, (10, 12): 0}, {(10, 10): 50 * MS, (10, 12): 45 * MS},
                              {10: 1, 12: 3}, cpu=(0, 95 * MS))
    within, none = outside_view.new_threads_violation(before, after, {1}, 40 * MS, 10, 5.0, 0.5)
    assert within == 45.0 and none is None  # 45 ms within 40 ms of calls and 10 ms of slack
    used, violation = outside_view.new_threads_violation(before, after, {1}, 20 * MS, 10, 5.0, 0.5)
    assert used == 45.0 and violation.rule == "background_thread" and "thread 3 of process 10" in violation.detail
    # A process of its own counts whole; a thread that ended meanwhile, from the process's total.
    child_before, child_after = snapshots(10, {(10, 10): 0}, {(10, 10): 10 * MS, (20, 20): 60 * MS}, {10: 1})
    assert "process 20" in outside_view.new_threads_violation(child_before, child_after, {1}, 20 * MS, 10, 5.0, 0.5)[1].detail
    ended_before, ended_after = snapshots(10, {(10, 10): 0}, {(10, 10): 10 * MS}, {10: 1}, cpu=(0, 200 * MS))
    ended = outside_view.new_threads_violation(ended_before, ended_after, {1}, 20 * MS, 10, 5.0, 0.5)[1]
    assert "threads that ended meanwhile" in ended.detail


def test_a_snapshot_of_this_process_sees_its_threads_and_their_cpu():
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    worker = threading.Thread(target=busy, daemon=True)
    worker.start()
    try:
        before = outside_view.snapshot(os.getpid(), with_tree=False)
        deadline = time.thread_time() + 0.05
        while time.thread_time() < deadline:
            sum(range(1000))
        after = outside_view.snapshot(os.getpid(), with_tree=False)
    finally:
        stop.set()
        worker.join()
    main = (os.getpid(), os.getpid())
    assert after.run_ns[main] - before.run_ns[main] >= 50 * MS
    assert after.inner_tids[os.getpid()] == os.getpid() and worker.native_id in after.inner_tids
    assert after.serving_cpu_ns >= before.serving_cpu_ns


def test_a_thread_of_the_candidates_that_works_while_no_call_runs_is_a_background_thread():
    after, later = snapshots(10, {(10, 10): 0, (10, 11): 0, (10, 12): 0},
                             {(10, 10): 1 * MS, (10, 11): 30 * MS, (10, 12): 1 * MS}, {10: 1, 11: 2, 12: 3})
    assert outside_view.idle_threads_violation(after, later, {1, 2}, 20.0, 2.0) is None  # the harness's, and 1 ms
    busy_after, busy_later = snapshots(10, {(10, 10): 0, (10, 12): 0}, {(10, 10): 0, (10, 12): 8 * MS}, {10: 1, 12: 3})
    violation = outside_view.idle_threads_violation(busy_after, busy_later, {1}, 20.0, 2.0)
    assert violation.rule == "background_thread" and "while no call ran" in violation.detail
