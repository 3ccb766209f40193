"""Every request that makes a candidate's worker work on the device outside its timing is made
under the device's untimed-work lock (locks.device_work), held by the evaluating process on the
worker's behalf: so no such work of one evaluation runs beside another's timing (#44: staging and
construction ran beside timings, and honest GPU candidates were flagged `timing_unaccounted`)."""

from __future__ import annotations

import contextlib

from pytest_cudaagent import evaluate
from pytest_cudaagent import evaluation as evaluation_module
from pytest_cudaagent.workers.channel import Worker
from tests.helpers import DATA, TEST_PROBLEMS, cpu_config

UNTIMED_DEVICE_WORK = {"construct", "forward", "check_held", "stage"}


def test_the_candidates_untimed_device_requests_hold_the_work_lock(monkeypatch):
    held = {"depth": 0}
    seen: list[tuple[str, bool]] = []
    real_work, real_request = evaluation_module.device_work, Worker.request

    @contextlib.contextmanager
    def watched_work(device):
        with real_work(device):
            held["depth"] += 1
            try:
                yield
            finally:
                held["depth"] -= 1

    def watched_request(self, message, *args, **kwargs):
        seen.append((message[0], held["depth"] > 0))
        return real_request(self, message, *args, **kwargs)

    monkeypatch.setattr(evaluation_module, "device_work", watched_work)
    monkeypatch.setattr(Worker, "request", watched_request)
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", DATA / "candidates" / "pytorch_leaky_relu.py",
                      cpu_config(timing=True, policy="permissive"))
    assert result.passed, result.summary()
    made = {name for name, _ in seen}
    assert UNTIMED_DEVICE_WORK <= made, made
    outside = sorted({name for name, under_lock in seen if name in UNTIMED_DEVICE_WORK and not under_lock})
    assert not outside, f"made outside the untimed-work lock: {outside}"
