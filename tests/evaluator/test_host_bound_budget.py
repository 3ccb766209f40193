"""A host-bound call (wall time at least TimingConfig.host_bound_ratio times its kernels' device
time) is timed over host_bound_repeat_ms, on the candidate's side and the baseline's alike (#40:
the host's speed for a launch per small operator switches level every second or so on the H100's
virtual machine, and ten 20 ms calls fell in one stretch)."""

import contextlib
import dataclasses

import pytest

from pytest_cudaagent import EvalConfig, TimingConfig
from pytest_cudaagent.core.files import check_candidate
from pytest_cudaagent.evaluation import Evaluation
from pytest_cudaagent.timing.timer import fresh_call_count, repeat_budget_ms
from tests.helpers import CPU_CANDIDATES, PROBLEMS

TIMING = TimingConfig(repeat_ms=100, host_bound_ratio=2.0, host_bound_repeat_ms=1000, min_samples=10,
                      max_samples=1000, fresh_inputs_bytes=1 << 30, timing_rounds=1)


def test_a_host_bound_call_gets_the_longer_budget():
    assert repeat_budget_ms(20.0, 3.4, TIMING) == 1000  # VanillaRNNHidden: 20 ms wall, 3.4 ms of kernels
    assert fresh_call_count(20.0, 1 << 20, TIMING, device_ms=3.4) == 50
    assert fresh_call_count(20.0, 1 << 20, TIMING) == 10  # unknown device time (the CPU): the usual budget


def test_a_device_bound_call_keeps_the_usual_budget():
    assert repeat_budget_ms(2.0, 1.9, TIMING) == 100
    assert fresh_call_count(2.0, 1 << 20, TIMING, device_ms=1.9) == 50
    assert fresh_call_count(2.0, 1 << 20, TIMING, device_ms=1.0) == 500  # exactly twice: host-bound


def test_the_longer_budget_stays_within_the_memory_for_fresh_sets_and_max_samples():
    assert fresh_call_count(1.0, 64 << 20, TIMING, device_ms=0.1) == 16  # 16 sets of 64 MiB fit in 1 GiB
    assert fresh_call_count(0.5, 1 << 10, TIMING, device_ms=0.01) == 1000  # capped at max_samples


def test_no_ratio_turns_it_off():
    off = dataclasses.replace(TIMING, host_bound_ratio=None)
    assert fresh_call_count(20.0, 1 << 20, off, device_ms=3.4) == 10


class _Stop(Exception):
    pass


@pytest.mark.parametrize(("device_ms", "wanted"), [(3.4, 50), (19.0, 10), (None, 10)])
def test_the_candidates_timed_calls_follow_its_warm_up_device_time(monkeypatch, device_ms, wanted):
    """The evaluator counts the candidate's timed calls from its warm-up's call time and device
    time, as the reference's worker counts its baseline's (ReferenceServer.timed_as_the_candidate).
    No eager baseline here, so that the calls are not split into rounds (test_timing_rounds.py)."""
    config = EvalConfig(device="cpu", timing_config=TIMING, baselines=())
    run = Evaluation(PROBLEMS / "row_sum.py", check_candidate(CPU_CANDIDATES / "row_sum.py"), config, "cpu")
    counted = []

    def timed_request(worker, reference_worker, warm, timed_count, before_time=None):
        counted.append(timed_count)
        raise _Stop

    class Worker:
        def request(self, message, timeout_s):
            assert message[0] == "warm"
            return {"per_call_ms": 20.0, "device_ms": device_ms, "device_busy_ms": device_ms, "kernel_names": [],
                    "own_kernel_names": [], "launch_overlapped": True, "findings": [], "precision": [],
                    "backend_settings": {}}

    monkeypatch.setattr(run, "_timing_lock", lambda who, worker: contextlib.nullcontext())
    monkeypatch.setattr(run, "_timed_request", timed_request)
    monkeypatch.setattr(run, "_collect_fresh_sets", lambda reference_worker: None)
    with pytest.raises(_Stop):
        run._time_candidate(Worker(), None, [{"inputs": [], "outputs": []}])
    assert counted == [wanted]
