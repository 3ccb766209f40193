import multiprocessing
import os
import threading
import time
from types import SimpleNamespace

from pytest_cudaagent.plugin import xdist_worker_id
from pytest_cudaagent.system.gpu_pinning import pin_xdist_worker_to_gpu
from pytest_cudaagent.timing.locks import device_lock, device_work


def _hold_lock(log_path: str, lock_dir: str) -> None:
    os.environ["CUDAAGENT_LOCK_LOG"] = log_path
    os.environ["CUDAAGENT_LOCK_DIR"] = lock_dir
    for _ in range(3):
        with device_lock("cpu"):
            time.sleep(0.05)


def test_device_lock_serialises_holders_across_processes(tmp_path):
    log = tmp_path / "lock.log"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_hold_lock, args=(str(log), str(tmp_path))) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    holds = sorted((int(a), int(r)) for _, _, a, r in (line.split() for line in log.read_text().splitlines()))
    assert len(holds) == 9
    for (_, released), (acquired, _) in zip(holds, holds[1:], strict=False):
        assert acquired >= released  # no two holds overlap


def test_xdist_workers_are_pinned_round_robin(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert pin_xdist_worker_to_gpu("gw1") == "5"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert pin_xdist_worker_to_gpu("gw2") == "3"


def test_no_pinning_outside_xdist_or_without_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert pin_xdist_worker_to_gpu(None) is None
    assert pin_xdist_worker_to_gpu("gw0") is None


# -- the work lock: untimed work never runs beside a timing -----------------------------------

def _in_thread(action) -> threading.Thread:
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    return thread


def _hold_work(events: dict, name: str, seconds: float, started: threading.Event | None = None) -> None:
    with device_work("cpu"):
        events[f"{name} acquired"] = time.monotonic()
        if started is not None:
            started.set()
        time.sleep(seconds)
        events[f"{name} released"] = time.monotonic()


def test_a_timing_waits_for_untimed_work_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path))
    events, started = {}, threading.Event()
    worker = _in_thread(lambda: _hold_work(events, "trial", 0.3, started))
    started.wait(10)
    with device_lock("cpu") as hold:
        events["timing acquired"] = time.monotonic()
    worker.join()
    assert hold.quiet and events["timing acquired"] >= events["trial released"]


def test_a_timing_goes_ahead_beside_work_that_does_not_end_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path))
    events, started = {}, threading.Event()
    worker = _in_thread(lambda: _hold_work(events, "stuck trial", 2.0, started))
    started.wait(10)
    with device_lock("cpu", quiet_wait_s=0.2) as hold:
        events["timing acquired"] = time.monotonic()
    worker.join()
    assert not hold.quiet and events["timing acquired"] < events["stuck trial released"]


def test_untimed_work_waits_for_a_timing_and_behind_a_waiting_one(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path))
    events, first_started = {}, threading.Event()
    first = _in_thread(lambda: _hold_work(events, "first trial", 0.5, first_started))
    first_started.wait(10)

    def timing() -> None:
        with device_lock("cpu") as hold:
            events["timing acquired"], events["quiet"] = time.monotonic(), hold.quiet
            time.sleep(0.3)
            events["timing released"] = time.monotonic()

    timer = _in_thread(timing)
    time.sleep(0.15)  # the timing is now waiting for the first trial
    second = _in_thread(lambda: _hold_work(events, "second trial", 0.0))
    for thread in (first, timer, second):
        thread.join(20)
    assert events["quiet"] and events["timing acquired"] >= events["first trial released"]
    # Arrived while the timing waited: it runs after the timing, not beside it (no starvation).
    assert events["second trial acquired"] >= events["timing released"]


def test_untimed_work_inside_a_timing_of_the_same_thread_does_not_wait_for_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path))
    done = threading.Event()

    def nested() -> None:
        with device_lock("cpu", quiet_wait_s=5) as hold, device_work("cpu"):
            if hold.quiet:
                done.set()

    thread = _in_thread(nested)
    thread.join(20)
    assert done.is_set() and not thread.is_alive()
    with device_work("cpu"):  # and the lock is free again afterwards
        pass


def test_the_evaluating_process_holds_the_timing_lock_on_the_candidates_behalf(tmp_path, monkeypatch):
    """A candidate's worker cannot open the lock directory (sandbox.py: one that could took the
    lock at import and held every other timing, #44): the evaluating process takes the lock for
    its warm-up and its timed calls, and the log names both it and the worker, so two
    evaluations' holds are told apart (each sandboxed worker is PID 1 of its own namespace)."""
    from pathlib import Path

    from pytest_cudaagent import evaluate
    from pytest_cudaagent.timing.locks import holder_id
    from tests.helpers import TEST_PROBLEMS, cpu_config

    assert holder_id().startswith(f"{os.getpid()}-") and holder_id() == holder_id()
    log = tmp_path / "lock.log"
    monkeypatch.setenv("CUDAAGENT_LOCK_LOG", str(log))
    candidate = Path(__file__).parents[1] / "adversarial" / "sandbox_candidates" / "honest_torch.py"
    results = [evaluate(TEST_PROBLEMS / "small_leaky_relu.py", candidate, cpu_config(timing=True, policy="permissive"))
               for _ in range(2)]
    assert all(result.passed for result in results), [result.summary() for result in results]
    holders = [line.split()[1] for line in log.read_text().splitlines()]
    assert len(holders) == 4 and all(">" in holder for holder in holders), holders  # warm-up and timed calls, twice
    assert {holder.split(">")[0] for holder in holders} == {holder_id()}, holders
    assert len({holder.split(">")[1] for holder in holders}) == 2, holders  # one worker per evaluation


def test_a_worker_is_pinned_by_xdists_own_id_not_an_inherited_variable(monkeypatch):
    """A pytest run started from inside an xdist worker inherits PYTEST_XDIST_WORKER: its
    controller (no `workerinput`) is no worker, and its workers are known by their own ids."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert xdist_worker_id(SimpleNamespace()) is None
    assert xdist_worker_id(SimpleNamespace(workerinput={"workerid": "gw1"})) == "gw1"
