"""The next candidate's worker started while this one is checked and timed (start_ahead.py): it
is built before its evaluation begins, taken only by that evaluation, judged as if started then,
and closed when its pair does not come."""

from __future__ import annotations

import re
import shutil
import threading
import time

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent import evaluation as evaluation_module
from pytest_cudaagent.workers import start_ahead
from pytest_cudaagent.workers.start_ahead import StartAhead, StartedWorker
from tests.adversarial.test_tampering import PROBLEM as TAMPERING_PROBLEM
from tests.adversarial.test_tampering import make_workspace
from tests.helpers import EXAMPLES, TEST_CANDIDATES, TEST_PROBLEMS, cpu_config

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"
SAYS_WHEN = TEST_CANDIDATES / "says_when_imported.py"
CONFIG = cpu_config(policy="permissive", trials=2)


@pytest.fixture(autouse=True)
def nothing_started():
    start_ahead.forget()
    yield
    start_ahead.forget()


@pytest.fixture
def two_candidates(tmp_path):
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    shutil.copy(SAYS_WHEN, first)
    shutil.copy(SAYS_WHEN, second)
    return first, second


def imported_at(result) -> float:
    found = re.search(r"^imported at ([0-9.]+)$", result.log, flags=re.MULTILINE)
    assert found, result.log
    return float(found.group(1))


def started_worker():
    return start_ahead.state()._started


def test_the_announced_candidate_builds_before_its_evaluation_and_is_judged_the_same(two_candidates):
    first, second = two_candidates
    start_ahead.state().announce(SMALL_LEAKY, second, CONFIG)
    first_result = evaluate(SMALL_LEAKY, first, CONFIG)
    started = started_worker()
    assert started is not None and started.worker.process.is_alive()
    deadline = time.monotonic() + 120
    while "imported at" not in started.worker.log_tail() and time.monotonic() < deadline:
        time.sleep(0.1)  # its import (the build) done, whatever the machine's load
    time.sleep(0.5)
    began = time.time()
    second_result = evaluate(SMALL_LEAKY, second, CONFIG)
    alone = evaluate(SMALL_LEAKY, second, CONFIG)  # nothing announced: started with its evaluation
    assert [first_result.status, second_result.status, alone.status] == ["passed"] * 3
    # Imported (built) before its evaluation began, in the worker started ahead.
    assert imported_at(second_result) < began
    assert second_result.env["started_ahead_s"] > 0.5
    assert "started_ahead_s" not in first_result.env and "started_ahead_s" not in alone.env
    assert imported_at(alone) > began
    # Judged as a worker started with its evaluation: the same trials, checks and reward.
    assert [t.correct for t in second_result.trials] == [t.correct for t in alone.trials]
    assert second_result.reward == alone.reward and second_result.violations == alone.violations
    same_sandbox = {key: value for key, value in second_result.env["sandbox"].items() if key != "setup_ms"}
    assert same_sandbox == {key: value for key, value in alone.env["sandbox"].items() if key != "setup_ms"}
    # Its worker and sandbox ended with its evaluation.
    assert not started.worker.process.is_alive() and not started.sandbox.scratch.exists()
    assert started_worker() is None


def test_the_next_worker_starts_only_once_the_current_candidate_has_built(two_candidates, monkeypatch):
    first, second = two_candidates
    seen = {}
    original = evaluation_module.start_ahead_worker

    def recording(problem, candidate, config):
        seen["at"] = time.time()
        return original(problem, candidate, config)

    monkeypatch.setattr(evaluation_module, "start_ahead_worker", recording)
    start_ahead.state().announce(SMALL_LEAKY, second, CONFIG)
    result = evaluate(SMALL_LEAKY, first, CONFIG)
    assert result.passed and imported_at(result) < seen["at"]  # the current one had built by then
    # ... and not later than its checks: the trials ran after the next worker started.
    assert result.phase_seconds["correctness"] > 0
    second_result = evaluate(SMALL_LEAKY, second, CONFIG)
    assert seen["at"] < imported_at(second_result)


def test_a_build_error_started_ahead_reads_as_one_started_with_its_evaluation(tmp_path):
    first = tmp_path / "first.py"
    shutil.copy(SAYS_WHEN, first)
    start_ahead.state().announce(SMALL_LEAKY, TEST_CANDIDATES / "build_error.py", CONFIG)
    assert evaluate(SMALL_LEAKY, first, CONFIG).passed
    started = started_worker()
    assert started is not None
    started.worker.process.join(timeout=120)  # its build fails and its process ends, unread
    ahead = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "build_error.py", CONFIG)
    alone = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "build_error.py", CONFIG)
    assert ahead.env["started_ahead_s"] > 0 and "started_ahead_s" not in alone.env
    assert ahead.status == alone.status == "build_error"
    assert ahead.error == alone.error and "error" in ahead.error


def test_a_crash_at_import_started_ahead_is_still_a_crash(tmp_path):
    first = tmp_path / "first.py"
    shutil.copy(SAYS_WHEN, first)
    start_ahead.state().announce(SMALL_LEAKY, TEST_CANDIDATES / "exits_on_import.py", CONFIG)
    assert evaluate(SMALL_LEAKY, first, CONFIG).passed
    ahead = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "exits_on_import.py", CONFIG)
    alone = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "exits_on_import.py", CONFIG)
    assert "started_ahead_s" in ahead.env
    assert (ahead.status, ahead.reward) == (alone.status, alone.reward) and not ahead.passed


def test_another_pair_or_other_settings_start_their_own_and_the_unused_worker_is_closed(two_candidates):
    first, second = two_candidates
    start_ahead.state().announce(SMALL_LEAKY, second, CONFIG)
    assert evaluate(SMALL_LEAKY, first, CONFIG).passed
    started = started_worker()
    other_settings = cpu_config(policy="permissive", trials=3)
    began = time.time()
    result = evaluate(SMALL_LEAKY, second, other_settings)
    assert result.passed and "started_ahead_s" not in result.env and imported_at(result) > began
    assert started_worker() is started  # not this evaluation's: left for the batch's end
    start_ahead.forget()
    started.worker.process.join(timeout=30)
    assert not started.worker.process.is_alive() and not started.sandbox.scratch.exists()


def test_a_candidate_changed_after_its_start_is_evaluated_as_it_is_now(two_candidates):
    first, second = two_candidates
    start_ahead.state().announce(SMALL_LEAKY, second, CONFIG)
    assert evaluate(SMALL_LEAKY, first, CONFIG).passed
    started = started_worker()
    second.write_text(second.read_text().replace("return torch.nn.functional.leaky_relu(x, self.negative_slope)",
                                                 "return x * 0"))
    began = time.time()
    result = evaluate(SMALL_LEAKY, second, CONFIG)
    assert result.status == "incorrect" and "started_ahead_s" not in result.env and imported_at(result) > began
    assert started_worker() is started


def test_a_worker_started_ahead_is_held_to_the_memory_cap_while_it_waits(tmp_path):
    """Its host memory is checked while the current evaluation waits on its own workers (where no
    cgroup holds it, that check is the cap): over it, killed then, and its evaluation says why."""
    slow = tmp_path / "slow.py"
    slow.write_text(SAYS_WHEN.read_text().replace(
        "        return torch.nn.functional.leaky_relu(x, self.negative_slope)",
        "        time.sleep(2.0)  # the current evaluation outlasts the next one's import\n"
        "        return torch.nn.functional.leaky_relu(x, self.negative_slope)"))
    hog = tmp_path / "hog.py"
    hog.write_text(SAYS_WHEN.read_text().replace(
        'print(f"imported at', 'held = bytearray(1300 * 2**20)  # over the 1 GiB cap, under the cgroup\'s 1.5\n'
        'time.sleep(60)\nprint(f"imported at'))
    capped = cpu_config(policy="permissive", trials=2, memory_cap_gb=1.0)
    start_ahead.state().announce(SMALL_LEAKY, hog, capped)
    assert evaluate(SMALL_LEAKY, slow, capped).passed
    started = started_worker()
    assert started is not None and not started.worker.process.is_alive()  # killed while it waited
    result = evaluate(SMALL_LEAKY, hog, capped)
    assert "started_ahead_s" in result.env
    assert result.status == "crashed" and "host memory" in result.error and "cap" in result.error


def test_a_file_that_is_no_candidate_starts_nothing_and_fails_as_before(tmp_path):
    first = tmp_path / "first.py"
    shutil.copy(SAYS_WHEN, first)
    start_ahead.state().announce(SMALL_LEAKY, TEST_CANDIDATES / "no_model_new.py", CONFIG)
    assert evaluate(SMALL_LEAKY, first, CONFIG).passed
    assert started_worker() is None
    with pytest.raises(ValueError, match="no class ModelNew"):
        evaluate(SMALL_LEAKY, TEST_CANDIDATES / "no_model_new.py", CONFIG)


def test_a_start_that_fails_leaves_the_current_verdict_and_the_next_starts_its_own(two_candidates, monkeypatch):
    first, second = two_candidates

    def broken(problem, candidate, config):
        raise OSError("no room for a scratch directory")

    monkeypatch.setattr(evaluation_module, "start_ahead_worker", broken)
    start_ahead.state().announce(SMALL_LEAKY, second, CONFIG)
    assert evaluate(SMALL_LEAKY, first, CONFIG).passed
    result = evaluate(SMALL_LEAKY, second, CONFIG)
    assert result.passed and "started_ahead_s" not in result.env


def test_a_workspace_that_edits_its_protected_files_while_started_ahead_is_caught(tmp_path):
    """Without the sandbox (which makes the workspace read-only), the protected files' hashes are
    the ones from before its worker started, not from when its evaluation began."""
    first = tmp_path / "first.py"
    shutil.copy(SAYS_WHEN, first)
    workspace = make_workspace(tmp_path)
    model_new = workspace / "model_new.py"
    model_new.write_text(
        "import pathlib\n"
        "pathlib.Path(__file__).with_name('utils').joinpath('verify.py').write_text('PASSED = True\\n')\n"
        + model_new.read_text())
    unconfined = cpu_config(sandbox=False)
    start_ahead.state().announce(TAMPERING_PROBLEM, workspace, unconfined)
    evaluate(TAMPERING_PROBLEM, first, unconfined)
    started = started_worker()
    assert started is not None
    verify = workspace / "utils" / "verify.py"
    deadline = time.monotonic() + 120
    while "PASSED" not in verify.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)  # its import has edited the file before its evaluation begins
    assert "PASSED" in verify.read_text()
    result = evaluate(TAMPERING_PROBLEM, workspace, unconfined)
    assert "started_ahead_s" in result.env
    assert not result.passed and any(v.rule == "tampering" and "verify.py" in v.detail for v in result.violations)


class FakeWorker:
    def __init__(self):
        self.closed = False
        self.process = self

    def is_alive(self):
        return not self.closed

    def close(self):
        self.closed = True


class FakeSandbox:
    closed = False

    def close(self):
        self.closed = True


def fake_start(key):
    return lambda problem, candidate, config: StartedWorker(key, FakeWorker(), FakeSandbox())


def test_only_the_evaluating_thread_announces_starts_and_takes():
    ahead = StartAhead()
    calls = []

    def elsewhere():
        ahead.announce("p.py", "c.py", CONFIG)
        ahead.start_announced(lambda *args: calls.append(args))
        calls.append(ahead.take("k"))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert calls == [None] and ahead._announced is None
    ahead.announce("p.py", "c.py", CONFIG)
    ahead.start_announced(fake_start("k"))
    assert ahead.take("other") is None
    taken = ahead.take("k")
    assert taken is not None and taken.key == "k" and ahead.take("k") is None


def test_a_cleared_announcement_starts_nothing():
    """The plugin clears it for a process's last item: an evaluation that ended before starting
    its next pair (its reference failed) must not leave that pair to be started by the next one."""
    ahead = StartAhead()
    ahead.announce("p.py", "c.py", CONFIG)
    ahead.clear_announced()
    assert ahead.start_announced(fake_start("k")) is None and ahead._started is None


def test_the_plugin_announces_the_next_pair_and_clears_after_the_last(pytester):
    from pytest_cudaagent import plugin
    from pytest_cudaagent.records.pairing import Pair

    config = pytester.parseconfig("--cudaagent-start-ahead", "--cudaagent-device", "cpu")
    config.stash[plugin.PATHS] = plugin._absolute_paths(config)
    session = pytest.Session.from_config(config)
    first, second = (plugin.CandidateItem.from_parent(session, name=name, pair=Pair(SMALL_LEAKY, SAYS_WHEN.with_name(name)))
                     for name in ("a.py", "b.py"))
    plugin.pytest_runtest_protocol(first, second)
    announced = start_ahead.state()._announced
    assert announced is not None and announced[:2] == (SMALL_LEAKY, SAYS_WHEN.with_name("b.py"))
    assert announced[2].device == "cpu"
    plugin.pytest_runtest_protocol(second, None)
    assert start_ahead.state()._announced is None


def test_a_new_start_or_forget_closes_a_worker_whose_pair_never_came():
    ahead = StartAhead()
    ahead.announce("p.py", "c.py", CONFIG)
    ahead.start_announced(fake_start("first"))
    unused = ahead._started
    ahead.start_announced(fake_start("ignored"))  # nothing announced since: no second start
    assert ahead._started is unused and not unused.worker.closed
    ahead.announce("p.py", "d.py", CONFIG)
    ahead.start_announced(fake_start("second"))
    assert unused.worker.closed and unused.sandbox.closed
    second = ahead._started
    ahead.forget()
    assert second.worker.closed and ahead._started is None


TICKS = TEST_CANDIDATES / "ticks_while_imported.py"
LEAKY_13MS = EXAMPLES / "problems" / "leaky_relu.py"  # 16M elements: a timed call of ~13 ms on the dev box


def _timed_with_a_ticking_next_worker(tmp_path, reserved_cpus: int):
    """Evaluates an honest leaky ReLU with timing and the eager baseline while the announced next
    candidate's worker ticks in its import; returns the Result and that worker's gaps (from, to)."""
    import dataclasses

    from tests.helpers import QUICK_TIMING

    first, ticking = tmp_path / "first.py", tmp_path / "ticking.py"
    shutil.copy(SAYS_WHEN, first)
    shutil.copy(TICKS, ticking)
    config = cpu_config(policy="permissive", trials=2, timing=True, baselines=("eager",),
                        cache_dir=tmp_path / "cache",
                        timing_config=dataclasses.replace(QUICK_TIMING, reserved_cpus=reserved_cpus))
    start_ahead.state().announce(LEAKY_13MS, ticking, config)
    result = evaluate(LEAKY_13MS, first, config)
    started = started_worker()
    assert started is not None and started.worker.process.is_alive(), "the next worker was not started ahead"
    log = started.worker.log_tail(max_chars=10**7)
    start_ahead.forget()  # closes it, long before its import ends
    gaps = [tuple(int(value) for value in line.split()[1:3]) for line in log.splitlines() if line.startswith("gap ")]
    return result, gaps


def test_the_worker_started_ahead_is_stopped_while_this_candidate_and_its_baseline_are_timed(tmp_path):
    """Without cores reserved for the timed process (the 2-core box's default), the next pair's
    worker, started ahead, is stopped with its tree while the candidate is warmed and timed and
    while eager is timed, and continues after: it ticks not once inside any of those windows."""
    result, gaps = _timed_with_a_ticking_next_worker(tmp_path, reserved_cpus=0)
    assert result.status == "passed", result.error
    paused = result.env.get("paused_ahead") or []
    assert {entry["for"] for entry in paused} >= {"the candidate's warm-up and device time", "the candidate",
                                                  "the eager baseline"}, paused
    for entry in paused:
        began, ended = entry["span_ns"]
        if ended - began < 25_000_000:  # the ticker reports gaps of 20 ms and more
            continue
        assert any(gap_from <= began and gap_to >= ended for gap_from, gap_to in gaps), (entry, gaps)
    assert any(entry["span_ns"][1] - entry["span_ns"][0] >= 25_000_000 for entry in paused), paused
    # It went on after the pauses: its import still ticking when the test closed it.
    assert all(entry["processes"] >= 1 for entry in paused)


def test_with_cores_reserved_for_timing_the_worker_started_ahead_builds_on(tmp_path):
    """Where the timed process has cores of its own, the next worker's build runs on the others
    and is never stopped."""
    import os

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no core can be reserved")
    result, _ = _timed_with_a_ticking_next_worker(tmp_path, reserved_cpus=1)
    assert result.status == "passed", result.error
    assert "paused_ahead" not in result.env
    assert "candidate" in result.timing and "eager" in result.timing
