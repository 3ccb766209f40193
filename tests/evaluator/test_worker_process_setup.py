"""What the workers do around their timed calls (#40): their seeding (worker._seed_all) leaves the
generators as torch.manual_seed leaves them, so a candidate drawing random numbers matches the
reference, without the traceback torch.manual_seed formats for every lazily seeded backend
(0.4-0.6 ms before every timed call of the candidate); and they have Kineto detach CUPTI after
the device-time profile."""

import dataclasses
import random
import traceback
from pathlib import Path

import pytest
import torch

from pytest_cudaagent import evaluate
from pytest_cudaagent.workers.worker import _seed_all
from tests.helpers import QUICK_TIMING, TEST_PROBLEMS, cpu_config


def _states():
    return random.getstate(), torch.get_rng_state(), torch.randn(4), random.random()


def test_the_generators_end_as_torch_manual_seed_leaves_them():
    for seed in (0, 7, 2**62 + 3):
        _seed_all(seed)
        ours = _states()
        random.seed(seed)
        torch.manual_seed(seed)
        theirs = _states()
        assert ours[0] == theirs[0] and torch.equal(ours[1], theirs[1]) and torch.equal(ours[2], theirs[2])
        assert ours[3] == theirs[3]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine CUDA may be seeded lazily, by torch's way")
def test_seeding_formats_no_traceback(monkeypatch):
    formatted = []
    real = traceback.format_stack
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: formatted.append(1) or real(*a, **k))
    _seed_all(11)
    assert formatted == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_every_started_cuda_device_is_seeded_as_torch_manual_seed_seeds_it():
    torch.ones(1, device="cuda")  # CUDA started, as in a GPU worker
    _seed_all(5)
    ours = [torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())], torch.randn(4, device="cuda")
    torch.manual_seed(5)
    theirs = [torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())], torch.randn(4, device="cuda")
    assert all(torch.equal(a, b) for a, b in zip(ours[0], theirs[0], strict=True))
    assert torch.equal(ours[1], theirs[1])


def test_workers_have_kineto_detach_cupti_after_the_profile_unless_told_not_to():
    """After the device-time profile CUPTI stays attached by default, and every later launch of
    the process (the timed calls') pays for it: the workers set TEARDOWN_CUPTI=1."""
    probe = Path(__file__).parent / "timing_candidates" / "needs_cupti_teardown.py"
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", probe, cpu_config(policy="permissive"))
    assert result.passed, result.summary()
    untold = dataclasses.replace(QUICK_TIMING, cupti_teardown=False)
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", probe, cpu_config(policy="permissive", timing_config=untold))
    assert result.status == "runtime_error" and "CUPTI" in result.error, result.summary()


@pytest.mark.parametrize("policy", ["calibration", "permissive"])
def test_timed_calls_run_without_python_hooks_or_the_audit(policy):
    """No profile or trace function, no dispatch or function mode and no autograd profiler during
    a timed call, whatever the policy: the probe raises under any of them inside Timer.timed_call.
    Not on time: the same probe fails when every timed call is audited (the control below)."""
    probe = Path(__file__).parent / "timing_candidates" / "raises_when_watched_in_timed_call.py"
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", probe, cpu_config(policy=policy, timing=True))
    assert result.passed, result.summary()
    assert result.timing["candidate"].samples >= QUICK_TIMING.min_samples


def test_the_probe_sees_a_watcher_in_the_timed_calls():
    """The control: with the operator audit on every timed call, the probe raises there."""
    probe = Path(__file__).parent / "timing_candidates" / "raises_when_watched_in_timed_call.py"
    audited = dataclasses.replace(QUICK_TIMING, audit_timed_calls=True)
    result = evaluate(TEST_PROBLEMS / "small_leaky_relu.py", probe,
                      cpu_config(policy="calibration", timing=True, timing_config=audited))
    assert not result.passed and "watched inside a timed call: a torch dispatch mode" in (result.error or ""), \
        result.summary()
