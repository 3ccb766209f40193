"""A timing holds the device against this run's untimed work (locks.device_work): when such work
does not end within TimingConfig.quiet_wait_s, the candidate and its baseline are timed beside
it, the Result warns `timed_beside_other_work`, and that baseline is not cached."""

import dataclasses
import threading

from pytest_cudaagent import evaluate
from pytest_cudaagent.timing.baseline_cache import BaselineCache
from pytest_cudaagent.timing.locks import device_work
from tests.helpers import QUICK_TIMING, REPO, TEST_PROBLEMS, cpu_config

CANDIDATE = REPO / "tests" / "adversarial" / "sandbox_candidates" / "honest_torch.py"  # no build


def evaluate_small(tmp_path):
    timing = dataclasses.replace(QUICK_TIMING, quiet_wait_s=0.2)
    config = cpu_config(timing=True, baselines=("eager",), timing_config=timing, cache_dir=tmp_path / "cache",
                        policy="permissive")
    return evaluate(TEST_PROBLEMS / "small_leaky_relu.py", CANDIDATE, config)


def test_work_that_outlasts_the_wait_is_reported_and_its_baseline_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path / "locks"))  # the run's own locks only
    held, done = threading.Event(), threading.Event()

    def stuck_trial() -> None:
        with device_work("cpu"):
            held.set()
            done.wait(300)

    thread = threading.Thread(target=stuck_trial)
    thread.start()
    held.wait(10)
    try:
        result = evaluate_small(tmp_path)
    finally:
        done.set()
        thread.join()
    assert result.passed, result.summary()
    beside = [w.detail for w in result.warnings if w.rule == "timed_beside_other_work"]
    assert any(d.startswith("the candidate") for d in beside) and any("eager baseline" in d for d in beside)
    assert not list(BaselineCache(tmp_path / "cache").root.rglob("*.json"))


def test_a_quiet_device_gives_no_warning_and_caches_the_baseline(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path / "locks"))
    result = evaluate_small(tmp_path)
    assert result.passed, result.summary()
    assert not [w for w in result.warnings if w.rule == "timed_beside_other_work"]
    assert list(BaselineCache(tmp_path / "cache").root.rglob("*.json"))
