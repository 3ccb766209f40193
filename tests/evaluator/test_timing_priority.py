"""While a worker times, its threads (and its children's) run at TimingConfig.timing_nice, and go
back afterwards; without the privilege to raise a priority nothing changes and the Result says so."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.priority import NOT_PERMITTED, raised
from tests.helpers import CPU_CANDIDATES, TEST_PROBLEMS, cpu_config

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
PRIVILEGED = os.geteuid() == 0
# A parent with a second thread and a child process, as a sandboxed candidate worker has.
TREE = """
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def nice_values(pid: int) -> list[int]:
    root = psutil.Process(pid)
    return [os.getpriority(os.PRIO_PROCESS, thread.id)
            for process in [root, *root.children(recursive=True)] for thread in process.threads()]


@pytest.fixture
def tree():
    parent = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    parent.stdout.readline()  # the child is running
    time.sleep(0.2)
    yield parent.pid
    for process in psutil.Process(parent.pid).children(recursive=True):
        process.kill()
    parent.kill()
    parent.wait()


@pytest.mark.skipif(not PRIVILEGED, reason="raising a priority needs root or CAP_SYS_NICE")
def test_every_thread_of_the_tree_is_raised_while_timing_and_put_back_after(tree):
    before = nice_values(tree)
    assert len(before) >= 3 and set(before) == {0}
    report = {}
    with raised(tree, -10, report):
        assert set(nice_values(tree)) == {-10}
    assert report["timing_nice"] == -10
    assert nice_values(tree) == before


@pytest.mark.skipif(PRIVILEGED, reason="root may raise priorities")
def test_without_the_privilege_nothing_changes_and_the_report_says_so(tree):
    report = {}
    with raised(tree, -10, report):
        assert set(nice_values(tree)) == {0}
    assert report["timing_nice"] == NOT_PERMITTED


def test_none_leaves_priorities_alone(tree):
    report = {}
    with raised(tree, None, report):
        assert set(nice_values(tree)) == {0}
    assert "timing_nice" not in report


def test_a_timed_evaluation_records_the_priority_it_timed_at():
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", CPU_CANDIDATES / "leaky_relu.py",
                      cpu_config(timing=True, baselines=("eager",)))
    assert result.status == "passed", result.error
    assert result.env["timing_nice"] == (-10 if PRIVILEGED else NOT_PERMITTED)
