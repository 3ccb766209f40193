"""A candidate's process or compiler killed from outside (SIGKILL, SIGTERM) says nothing of the
candidate: the evaluation runs once more and the Result says so; the candidate's own crashes and
build errors keep their verdicts (issue #17: kill at any moment, resume, same verdicts)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.evaluation import Evaluation
from pytest_cudaagent.workers.outside_kill import RULE, killed_from_outside
from tests.helpers import TEST_CANDIDATES, TEST_PROBLEMS, cpu_config

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"


@pytest.mark.parametrize("error", [
    "correctness: worker killed by SIGKILL",
    "build: worker killed by SIGTERM",
])
def test_a_worker_killed_by_sigkill_or_sigterm_was_killed_from_outside(error):
    assert killed_from_outside("crashed", error)


@pytest.mark.parametrize("error", [
    "correctness: worker killed by SIGSEGV",  # the candidate's own fault
    "correctness: worker killed by SIGABRT",
    "correctness: killed: host memory 9.1 GiB over the cap of 8.0 GiB",  # ours, for a reason
    "killed: the candidate started more processes than its limit (SandboxLimits.processes)",
    "correctness: worker exited with code 0 before giving a verdict",
])
def test_the_candidates_own_crashes_and_our_kills_are_not(error):
    assert not killed_from_outside("crashed", error)


@pytest.mark.parametrize("output", [
    "c++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.",
    "g++: internal compiler error: Terminated signal terminated program cc1plus",
    "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
    "nvcc error   : 'ptxas' died due to signal 15 (Termination signal)",
    "subprocess.CalledProcessError: Command '['ninja', '-v']' died with <Signals.SIGKILL: 9>.",
    "ninja: build stopped: interrupted by user.",
])
def test_a_compiler_killed_by_a_signal_is_a_kill_from_outside(output):
    assert killed_from_outside("build_error", "build failed: RuntimeError: Error building extension 'x': " + output)


@pytest.mark.parametrize("output", [
    "x.cu(3): error: identifier \"undefined_thing\" is undefined",
    "c++: fatal error: no input files",
    "nvcc error   : 'cicc' died due to signal 11 (Invalid memory reference)",  # a compiler bug, every time
])
def test_a_build_that_fails_on_its_own_is_not(output):
    assert not killed_from_outside("build_error", output)


def test_only_crashes_and_build_errors_can_be_kills_from_outside():
    assert not killed_from_outside("incorrect", "worker killed by SIGKILL")
    assert not killed_from_outside("runtime_error", "c++: fatal error: Killed signal terminated program cc1plus")


def test_a_candidate_killed_from_outside_is_evaluated_again_and_says_so(monkeypatch):
    """The first evaluation's candidate process is SIGKILLed in the middle of its forward; the
    second, started without the variable that made it sleep, passes: the verdict an
    uninterrupted run gives, with `evaluated_again` naming the first outcome."""
    monkeypatch.setenv("CUDAAGENT_TEST_SLEEP_IN_FORWARD", "1")
    spawned = []
    original_spawn = Evaluation._spawn_candidate

    def spawn_and_keep(self):
        worker = original_spawn(self)
        spawned.append(worker)
        return worker

    monkeypatch.setattr(Evaluation, "_spawn_candidate", spawn_and_keep)

    def kill_the_first_candidate():
        while not spawned:
            time.sleep(0.05)
        time.sleep(3)  # into its forward's sleep (the first evaluation cannot end before a minute)
        os.environ.pop("CUDAAGENT_TEST_SLEEP_IN_FORWARD", None)  # the next worker starts without it
        os.kill(spawned[0].process.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_first_candidate, daemon=True)
    killer.start()
    result = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "sleeps_when_told.py", cpu_config(policy="permissive"))
    killer.join(5)
    assert len(spawned) == 2
    assert result.status == "passed", result.error
    again = [warning for warning in result.warnings if warning.rule == RULE]
    assert len(again) == 1 and "crashed" in again[0].detail and "SIGKILL" in again[0].detail


def test_a_candidate_that_crashes_on_its_own_is_evaluated_once(monkeypatch):
    spawned = []
    original_spawn = Evaluation._spawn_candidate
    monkeypatch.setattr(Evaluation, "_spawn_candidate", lambda self: spawned.append(1) or original_spawn(self))
    result = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "segfault.py", cpu_config())
    assert result.status == "crashed" and len(spawned) == 1
    assert not [warning for warning in result.warnings if warning.rule == RULE]
