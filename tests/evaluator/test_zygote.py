"""Workers forked from the zygote (pytest_cudaagent/workers/zygote.py): as fresh and as private as a
spawned worker, and no process of it outlives the evaluator."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_cudaagent.workers import zygote
from pytest_cudaagent.workers.channel import Worker, WorkerDied
from tests.evaluator.zygote_targets import (
    report_and_stay,
    report_descriptors,
    report_modules,
    report_surroundings,
    try_the_zygote_socket,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux's")


@pytest.fixture
def worker_of():
    started = []

    def make(target) -> Worker:
        worker = Worker(target, {}, memory_cap_gb=4)
        started.append(worker)
        return worker

    yield make
    for worker in started:
        worker.close()


def test_a_forked_worker_holds_no_descriptor_but_its_own_pipe(worker_of):
    worker = worker_of(report_descriptors)
    reply = worker.receive(120)
    assert worker.start_method == "zygote", worker.start_error
    fds = reply["fds"]
    # stdin, stdout and stderr, and its end of the pipe: nothing of the zygote's (its control
    # socket would let a candidate ask for an unconfined process), nothing of a sibling's.
    assert set(fds) == {0, 1, 2, reply["conn"]}, fds
    assert fds[reply["conn"]] == "socket"


def test_a_sandboxed_candidate_finds_no_socket_to_ask(worker_of):
    worker = worker_of(try_the_zygote_socket)
    assert worker.receive(120)["answered"] == []


def test_a_forked_worker_sees_the_environment_directory_and_path_of_now(worker_of, monkeypatch, tmp_path):
    first = worker_of(report_surroundings).receive(120)
    monkeypatch.setenv("CUDAAGENT_TEST_MARK", "set after the zygote started")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    worker = worker_of(report_surroundings)
    now = worker.receive(120)
    assert worker.start_method == "zygote", worker.start_error
    assert first["mark"] is None
    assert now["mark"] == "set after the zygote started"
    assert now["cwd"] == str(tmp_path)
    assert now["sys_path"][0] == str(tmp_path)
    # a new environment, a new zygote (modules read some variables when imported)
    assert now["parent"] != first["parent"]


def test_forked_siblings_draw_different_random_numbers(worker_of):
    replies = [worker_of(report_surroundings).receive(120) for _ in range(2)]
    assert replies[0]["numpy"] != replies[1]["numpy"]
    assert replies[0]["random"] != replies[1]["random"]


def test_the_zygote_of_an_earlier_environment_ends_once_idle(worker_of, monkeypatch):
    first = worker_of(report_and_stay)
    first_zygote = first.receive(120)["parent"]
    monkeypatch.setenv("CUDAAGENT_TEST_MARK", "another environment")
    second = worker_of(report_and_stay)
    second_zygote = second.receive(120)["parent"]
    # The first zygote still has a live child (the first worker): it stays.
    assert {first_zygote, second_zygote} <= set(zygote.running_pids())
    first.close()
    second.close()
    monkeypatch.setenv("CUDAAGENT_TEST_MARK", "a third environment")
    worker_of(report_surroundings).receive(120)
    running = zygote.running_pids()
    assert first_zygote not in running and second_zygote not in running
    assert not psutil.pid_exists(first_zygote) or psutil.Process(first_zygote).status() == psutil.STATUS_ZOMBIE


def test_each_test_of_a_session_forks_from_the_same_zygote(worker_of, monkeypatch):
    """pytest sets PYTEST_CURRENT_TEST for every test: no new zygote (and its torch imports, 8-12 s
    on a busy GPU machine) for each evaluation the plugin runs; any other change still gets one."""
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/a.py::test_one (call)")
    first = worker_of(report_and_stay).receive(120)["parent"]
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/a.py::test_two (call)")
    assert worker_of(report_and_stay).receive(120)["parent"] == first
    monkeypatch.setenv("CUDAAGENT_TEST_MARK", "an environment an import could read")
    assert worker_of(report_and_stay).receive(120)["parent"] != first


def test_a_zygote_forgets_the_children_that_ended(worker_of):
    """One zygote may fork thousands of workers in a trainer's run: those that ended are dropped."""
    for _ in range(3):
        ended = Worker(report_surroundings, {}, memory_cap_gb=4)
        ended.receive(120)
        ended.close()
    parent = worker_of(report_and_stay).receive(120)["parent"]
    with zygote._lock:
        owned = [z for z in zygote._zygotes.values() if z.process.pid == parent]
    assert len(owned) == 1 and len(owned[0].children) == 1


def test_a_killed_zygote_takes_its_workers_and_is_replaced(worker_of):
    worker = worker_of(report_surroundings)
    parent = worker.receive(120)["parent"]
    assert parent in zygote.running_pids()
    os.kill(parent, signal.SIGKILL)
    with pytest.raises(WorkerDied):
        worker.receive(30)
    assert worker.process.exitcode == -signal.SIGKILL
    again = worker_of(report_surroundings)
    assert again.start_method == "zygote", again.start_error
    assert again.receive(120)["parent"] != parent


def test_a_worker_killed_and_closed_from_two_threads_at_once_ends_cleanly(worker_of):
    """A pool's stopping thread kills the workers that its serving threads are closing."""
    import threading

    workers = [worker_of(report_and_stay) for _ in range(3)]
    for worker in workers:
        worker.receive(120)
    errors = []

    def run(action):
        try:
            action()
        except BaseException as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=run, args=(action,)) for worker in workers
               for action in (worker.kill, worker.close, worker.kill)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert all(worker.process.exitcode is not None for worker in workers)


def test_without_the_zygote_workers_are_spawned(worker_of, monkeypatch):
    monkeypatch.setenv(zygote.ENABLE_ENV, "0")
    worker = worker_of(report_surroundings)
    reply = worker.receive(120)
    assert worker.start_method == "spawn"
    assert reply["parent"] == os.getpid()


def test_a_zygote_started_ahead_is_the_one_forked_from(worker_of, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_TEST_MARK", "a zygote started ahead")
    before = set(zygote.running_pids())
    zygote.prestart()
    started = set(zygote.running_pids()) - before
    assert len(started) == 1
    worker = worker_of(report_surroundings)
    assert worker.receive(120)["parent"] in started


def test_a_process_forked_from_the_evaluator_starts_its_own_zygote(worker_of):
    """Two processes writing fork requests on one control socket would garble both."""
    parent_zygote = worker_of(report_surroundings).receive(120)["parent"]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked copy
        code = 1
        try:
            worker = Worker(report_surroundings, {}, memory_cap_gb=4)
            reply = worker.receive(120)
            os.write(write_end, str(reply["parent"]).encode())
            worker.close()
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(child, 0)
    child_zygote = int(os.read(read_end, 64) or b"0")
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    assert child_zygote and child_zygote != parent_zygote
    assert worker_of(report_surroundings).receive(120)["parent"] == parent_zygote  # ours still answers


def test_a_target_of_a_script_main_is_spawned():
    def local_target(conn, spec):  # pragma: no cover - never run; only its module matters
        pass

    local_target.__module__ = "__main__"
    assert not zygote.can_fork(local_target)
    assert zygote.can_fork(report_surroundings)


def test_a_zygote_whose_imports_touched_cuda_is_not_forked_from(worker_of, monkeypatch):
    monkeypatch.setattr(zygote, "PRELOAD", (*zygote.PRELOAD, "tests.evaluator.poisoning_import"))
    monkeypatch.setenv("CUDAAGENT_TEST_MARK", "a zygote with the poisoning import")
    worker = worker_of(report_surroundings)
    reply = worker.receive(120)
    assert worker.start_method == "spawn"
    assert "touched CUDA" in worker.start_error
    assert reply["parent"] == os.getpid()


def test_the_zygote_is_ready_before_its_after_ready_imports_and_forks_with_them_once_in(worker_of, monkeypatch,
                                                                                       tmp_path):
    """The zygote says it is ready once PRELOAD less AFTER_READY is in: an AFTER_READY import that
    blocks does not hold up that word (before, the first fork waited for every import), and
    children forked once it is in find it imported."""
    release = tmp_path / "release"
    module = "tests.evaluator.waits_for_a_file_import"
    monkeypatch.setattr(zygote, "PRELOAD", (*zygote.PRELOAD, module))
    monkeypatch.setattr(zygote, "AFTER_READY", (*zygote.AFTER_READY, module))
    monkeypatch.setenv("CUDAAGENT_TEST_RELEASE", str(release))  # a new environment: a zygote of its own
    started = zygote._current()
    # While the import still waits (it would for four minutes: imported before the word, as every
    # module was before, this times out).
    started.report = started._receive(120, "say it is ready")
    assert started.report == {"fork_poisoned": False}
    release.touch()
    deadline = time.monotonic() + 120
    imported: list = []
    while module not in imported and time.monotonic() < deadline:
        worker = worker_of(report_modules)
        imported = worker.receive(120)["imported"]
        assert worker.start_method == "zygote", worker.start_error
        time.sleep(2 * zygote.QUIET_BEFORE_LATER_S)  # the imports begin once no fork has come for that long
    assert imported == [module, "torch._dynamo"]


def test_the_forks_asked_for_right_after_the_first_are_not_held_up_by_the_after_ready_imports(
        worker_of, monkeypatch, tmp_path):
    """An evaluation asks for its candidate's and its reference's worker back to back: the second
    is forked at once, not after an AFTER_READY import begun between the two (here one that would
    block for four minutes; on the H200 machine torch._dynamo's took 4-6 s). Neither child finds
    the module: the imports wait for a quiet moment after the forks."""
    release = tmp_path / "release"
    module = "tests.evaluator.waits_for_a_file_import"
    monkeypatch.setattr(zygote, "PRELOAD", (*zygote.PRELOAD, module))
    monkeypatch.setattr(zygote, "AFTER_READY", (module, *zygote.AFTER_READY))
    monkeypatch.setattr(zygote, "QUIET_BEFORE_LATER_S", 60.0)  # longer than this test's two forks
    monkeypatch.setenv("CUDAAGENT_TEST_RELEASE", str(release))  # a new environment: a zygote of its own
    started = zygote._current()
    started.report = started._receive(120, "say it is ready")
    try:
        for _ in range(2):
            began = time.monotonic()
            worker = worker_of(report_modules)
            imported = worker.receive(120)["imported"]
            assert worker.start_method == "zygote", worker.start_error
            assert module not in imported
            assert time.monotonic() - began < 30
    finally:
        release.touch()


def test_the_zygote_waits_for_its_first_fork_before_the_after_ready_imports(worker_of, monkeypatch, tmp_path):
    """Ready, and no fork asked for: the zygote does not start an import that a first fork would
    then wait for (a batch's xdist worker is still importing torch itself when its zygote is
    ready). Here the import would block; the first fork comes well after the zygote's word."""
    release = tmp_path / "release"
    module = "tests.evaluator.waits_for_a_file_import"
    monkeypatch.setattr(zygote, "PRELOAD", (*zygote.PRELOAD, module))
    monkeypatch.setattr(zygote, "AFTER_READY", (module, *zygote.AFTER_READY))
    monkeypatch.setenv("CUDAAGENT_TEST_RELEASE", str(release))
    started = zygote._current()
    started.report = started._receive(120, "say it is ready")
    time.sleep(2 * zygote.QUIET_BEFORE_LATER_S)  # a zygote that imports while idle would be blocked by now
    try:
        began = time.monotonic()
        worker = worker_of(report_modules)
        assert module not in worker.receive(120)["imported"]
        assert time.monotonic() - began < 30
    finally:
        release.touch()


def test_an_after_ready_import_that_touches_cuda_ends_the_forks(monkeypatch):
    """Found after the zygote said it was ready: its later forks are refused with the reason, and
    the worker is spawned instead."""
    monkeypatch.setattr(zygote, "PRELOAD", (*zygote.PRELOAD, "tests.evaluator.poisoning_import"))
    monkeypatch.setattr(zygote, "AFTER_READY", (*zygote.AFTER_READY, "tests.evaluator.poisoning_import"))
    monkeypatch.setenv("CUDAAGENT_TEST_MARK", "a zygote with a poisoning import after ready")
    deadline = time.monotonic() + 120
    methods = []
    while time.monotonic() < deadline:
        worker = Worker(report_surroundings, {}, memory_cap_gb=4)
        try:
            worker.receive(120)
            methods.append(worker.start_method)
            if worker.start_method == "spawn":
                assert "touched CUDA" in worker.start_error
                break
        finally:
            worker.close()
        time.sleep(2 * zygote.QUIET_BEFORE_LATER_S)  # the imports begin once no fork has come for that long
    assert methods[-1] == "spawn", methods


def test_a_candidates_worker_has_the_after_ready_modules_before_its_code(tmp_path):
    """Whatever its zygote had imported when it forked it: torch._dynamo and Triton are in before
    the sandbox and the candidate's code (worker.candidate_main)."""
    from pytest_cudaagent import evaluate
    from tests.helpers import TEST_PROBLEMS, cpu_config

    candidate = tmp_path / "reports_modules.py"
    candidate.write_text(
        "import sys\nimport torch\nimport torch.nn as nn\n"
        "print('at import:', sorted(name for name in ('torch._dynamo', 'triton') if name in sys.modules), flush=True)\n"
        "class ModelNew(nn.Module):\n    def __init__(self, *args):\n        super().__init__()\n"
        "    def forward(self, x):\n        return torch.nn.functional.leaky_relu(x, 0.01)\n")
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", candidate, cpu_config(policy="permissive", trials=1))
    assert "at import: ['torch._dynamo', 'triton']" in result.log, result.log


def test_a_module_that_fails_to_import_in_the_zygote_is_left_to_the_workers(worker_of, monkeypatch):
    monkeypatch.setattr(zygote, "PRELOAD", ("tests.evaluator.broken_import", *zygote.PRELOAD))
    monkeypatch.setenv("CUDAAGENT_TEST_MARK", "a zygote with a broken import")
    worker = worker_of(report_surroundings)
    assert worker.receive(120)["parent"] != os.getpid()
    assert worker.start_method == "zygote", worker.start_error


def test_an_evaluation_says_how_its_workers_started():
    from pytest_cudaagent import evaluate
    from tests.helpers import TEST_PROBLEMS, cpu_config

    problem = TEST_PROBLEMS / "small_leaky_relu.py"
    candidate = Path(__file__).parents[1] / "adversarial" / "sandbox_candidates" / "honest_torch.py"
    result = evaluate(problem, candidate, cpu_config(policy="permissive", trials=1))
    assert result.passed, result.summary()
    assert result.env["workers"] == {"reference": "zygote", "candidate": "zygote"}


def test_the_zygote_ends_when_its_evaluator_ends(tmp_path):
    """Closing the zygote's pipe (what the kernel does when the evaluator dies) ends it."""
    worker = Worker(report_surroundings, {}, memory_cap_gb=4)
    parent = worker.receive(120)["parent"]
    worker.close()
    with zygote._lock:
        owned = [z for z in zygote._zygotes.values() if z.process.pid == parent]
    assert owned
    owned[0].close()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(parent) and psutil.Process(parent).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the zygote outlived its closed pipe"
        time.sleep(0.1)

