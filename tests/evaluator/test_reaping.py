"""A process that evaluates for days reaps every child it starts (issue #38): a zygote whose exit
outlasts its wait (torch's teardown on a loaded machine) and workers spawned without one leave
no zombie behind, which psutil cannot read the command line of."""

from __future__ import annotations

import psutil

from pytest_cudaagent import evaluate
from pytest_cudaagent.workers import zygote
from tests.helpers import CPU_CANDIDATES, TEST_PROBLEMS, cpu_config

PAIR = (TEST_PROBLEMS / "small_leaky_relu.py", CPU_CANDIDATES / "leaky_relu.py")


def zombie_children() -> list[int]:
    zombies = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                zombies.append(child.pid)
        except psutil.NoSuchProcess:
            continue
    return zombies


def test_a_long_lived_evaluator_leaves_no_zombie_children(monkeypatch):
    # Never waited for: as when torch's teardown outlasts the wait on a loaded machine.
    monkeypatch.setattr(zygote, "EXIT_WAIT_S", 0.0)
    config = cpu_config(policy="permissive", trials=1)
    statuses = [evaluate(*PAIR, config).status]
    with monkeypatch.context() as spawning:
        spawning.setenv(zygote.ENABLE_ENV, "0")  # workers spawned by this process itself
        statuses.append(evaluate(*PAIR, config).status)
    # Another environment, last (a process started later would reap what came before): a new
    # zygote, and the one before it ends (zygote._end_idle).
    monkeypatch.setenv("CUDAAGENT_TEST_REAPING", "another environment")
    statuses.append(evaluate(*PAIR, config).status)
    assert statuses == ["passed"] * 3
    assert zombie_children() == []
