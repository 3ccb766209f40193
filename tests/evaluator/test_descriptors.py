"""File descriptors of a process that evaluates for days (issue #38): the evaluator waits on its
workers with poll(2), which takes any descriptor number (select(2) raised "filedescriptor out of
range" once an evaluation of a level-3 model held a descriptor per weight received), and leaks
none, however many evaluations it runs."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.system.fd_wait import readable, ready
from pytest_cudaagent.workers import start_ahead, zygote
from tests.helpers import TEST_CANDIDATES, TEST_PROBLEMS, cpu_config

REPO_ROOT = Path(__file__).resolve().parents[2]
MANY = TEST_PROBLEMS / "many_parameters.py"
DESCRIPTORS_NEEDED = 2048


def test_poll_waits_on_a_descriptor_above_1023():
    read_end, write_end = os.pipe()
    high = 1500
    try:
        os.dup2(read_end, high)
        assert not readable(high, 0) and ready([high], 0) == []
        os.write(write_end, b"x")
        assert readable(high, 0) and ready([high], 0) == [high]
    finally:
        for fd in (read_end, write_end, high):
            os.close(fd)


@pytest.fixture
def descriptors():
    """Room for the problem's 1200 weights' descriptors and more (the soft limit raised up to
    the hard one; skipped where the hard one is lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < DESCRIPTORS_NEEDED:
        if hard != resource.RLIM_INFINITY and hard < DESCRIPTORS_NEEDED:
            pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}; the test needs {DESCRIPTORS_NEEDED}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS_NEEDED, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.skipif(not zygote.enabled(), reason="the zygote's status pipe is what select could not take")
def test_a_worker_started_while_the_evaluator_holds_over_1023_descriptors_is_still_watched(tmp_path, descriptors):
    """The next pair's worker is started (start_ahead) while this evaluation holds the reference's
    1200 weights, each a descriptor: its exit-status pipe gets a number above 1023, which the
    next evaluation waits on."""
    config = cpu_config(policy="permissive", trials=1, cache_dir=tmp_path / "cache")
    second = tmp_path / "many_parameters_second.py"
    shutil.copy(TEST_CANDIDATES / "many_parameters.py", second)
    start_ahead.forget()
    try:
        start_ahead.state().announce(MANY, second, config)
        first = evaluate(MANY, TEST_CANDIDATES / "many_parameters.py", config)
        started = start_ahead.state()._started
        assert started is not None and started.worker.start_method == "zygote"
        assert started.worker.process._status_fd > 1023
        second_result = evaluate(MANY, second, config)
    finally:
        start_ahead.forget()
    assert first.passed and second_result.passed, (first.summary(), second_result.summary())
    assert second_result.env["started_ahead_s"] > 0


LOOP = """
import json, os, resource, sys
from pytest_cudaagent import evaluate
from tests.helpers import CPU_CANDIDATES, TEST_PROBLEMS, cpu_config

config = cpu_config(policy="permissive", trials=1, cache_dir=sys.argv[1])
pair = (TEST_PROBLEMS / "small_leaky_relu.py", CPU_CANDIDATES / "leaky_relu.py")
assert evaluate(*pair, config).passed  # the zygote started, the build cached
open_now = lambda: len(os.listdir("/proc/self/fd"))
base = open_now()
limit = base + int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
statuses = [evaluate(*pair, config).status for _ in range(int(sys.argv[3]))]
print(json.dumps({"base": base, "after": open_now(), "limit": limit, "statuses": statuses}))
"""


def test_more_evaluations_than_the_descriptor_limit_allows_if_any_leaked(tmp_path):
    """An evaluation needs about 15 descriptors at once beyond what the process holds; under a
    limit 40 above that, 60 evaluations in one process would run out if each leaked one."""
    headroom, evaluations = 40, 60
    run = subprocess.run([sys.executable, "-c", LOOP, str(tmp_path / "cache"), str(headroom), str(evaluations)],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["statuses"] == ["passed"] * evaluations
    assert report["after"] == report["base"]
