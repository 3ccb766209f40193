"""Result.env names each process of an evaluation (#38): a kernel's OOM-kill line gives only a PID
and its memory; the run's rows say whose it was."""

from __future__ import annotations

import os

from pytest_cudaagent import evaluate
from tests.helpers import DATA, TEST_PROBLEMS, cpu_config


def test_the_result_names_its_processes_and_their_peak_host_memory():
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", DATA / "candidates" / "pytorch_leaky_relu.py",
                      cpu_config(policy="permissive"))
    assert result.passed, result.summary()
    pids = result.env["pids"]
    assert pids["evaluator"] == os.getpid()
    assert {type(pids["candidate"]), type(pids["reference"])} == {int}
    assert len({pids["evaluator"], pids["candidate"], pids["reference"]}) == 3
    peaks = result.env["peak_rss_gib"]
    assert set(peaks) == {"candidate", "reference"}
    assert all(isinstance(value, float) and 0 <= value < 64 for value in peaks.values())
