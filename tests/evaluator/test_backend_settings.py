"""Backend settings (TF32, matmul precision, cudnn.benchmark, deterministic algorithms): captured,
applied, compared; a candidate that changes them is timed against baselines under its settings;
unstable baselines are re-measured and flagged. All of these knobs can be set on a CPU build of
torch (they change nothing there), so the mechanism is tested on the CPU."""

import dataclasses
import json
import os

import pytest
import torch

from pytest_cudaagent import evaluate
from pytest_cudaagent.core.config import TimingConfig
from pytest_cudaagent.core.files import check_candidate
from pytest_cudaagent.core.result import Result, TimingStats, Violation
from pytest_cudaagent.evaluation import Evaluation
from pytest_cudaagent.records.results_file import append_result, read_results
from pytest_cudaagent.rules.provenance import precision_flags
from pytest_cudaagent.timing.backend_settings import (
    BackendSettings,
    allows_tf32,
    applied,
    apply,
    capture,
    diff,
    for_preset,
    lower_precision_signs,
)
from pytest_cudaagent.timing.baseline_cache import BaselineCache
from pytest_cudaagent.timing.baseline_spread import steadiest, unstable_warning
from tests.helpers import QUICK_TIMING, TEST_CANDIDATES, TEST_PROBLEMS, cpu_config

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"


@pytest.fixture
def defaults(monkeypatch):
    """This process's settings, put back after the test (the tests below change them)."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # restored after the test
    before = capture()
    yield before
    apply(before)


# -- capture, apply, diff -----------------------------------------------------------------------


def test_capture_names_every_setting_the_timings_depend_on(defaults):
    names = set(defaults.values)
    assert {"cudnn.allow_tf32", "cuda.matmul.allow_tf32", "float32_matmul_precision", "cudnn.benchmark",
            "cudnn.deterministic", "deterministic_algorithms"} <= names
    assert defaults.values["cudnn.benchmark"] is torch.backends.cudnn.benchmark


def test_apply_sets_what_differs_and_diff_names_it(defaults):
    wanted = BackendSettings({**defaults.values, "cudnn.benchmark": not defaults.values["cudnn.benchmark"],
                              "deterministic_algorithms": True})
    assert apply(wanted) == []
    assert torch.backends.cudnn.benchmark is wanted.values["cudnn.benchmark"]
    assert torch.are_deterministic_algorithms_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"]  # cuBLAS refuses deterministic mode without it
    assert diff(defaults, capture()) == [
        f"cudnn.benchmark: {defaults.values['cudnn.benchmark']} -> {wanted.values['cudnn.benchmark']}",
        "deterministic_algorithms: False -> True"]


def test_applied_restores_the_earlier_settings(defaults):
    flipped = BackendSettings({**defaults.values, "cudnn.benchmark": not defaults.values["cudnn.benchmark"]})
    with applied(flipped) as unreached:
        assert unreached == [] and torch.backends.cudnn.benchmark is flipped.values["cudnn.benchmark"]
    assert torch.backends.cudnn.benchmark is defaults.values["cudnn.benchmark"]


def test_a_candidates_tf32_switch_is_reproduced_from_its_captured_settings(defaults):
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.benchmark = True
    candidate = capture()
    apply(defaults)
    assert torch.get_float32_matmul_precision() == defaults.values["float32_matmul_precision"]
    assert apply(candidate) == []
    assert capture() == candidate and torch.backends.cuda.matmul.allow_tf32


def test_strict_fp32_turns_tf32_off_everywhere_and_pytorch_default_is_the_defaults(defaults):
    assert for_preset("pytorch-default", defaults) == defaults
    strict = for_preset("strict-fp32", defaults)
    assert strict.values["cudnn.allow_tf32"] is False and strict.values["cuda.matmul.allow_tf32"] is False
    assert strict.values["float32_matmul_precision"] == "highest"
    assert not allows_tf32(strict)
    assert capture() == defaults  # reading the preset left this process as it was
    with pytest.raises(ValueError, match="strict-fp32"):
        for_preset("fast", defaults)


def test_lower_precision_is_what_the_candidate_turned_on_beyond_the_runs_settings(defaults):
    default_run = for_preset("pytorch-default", defaults)
    strict_run = for_preset("strict-fp32", defaults)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default: the eager baseline has it too
    assert lower_precision_signs(default_run, capture()) == []
    assert lower_precision_signs(strict_run, capture())  # beyond strict-fp32
    torch.backends.cuda.matmul.allow_tf32 = True
    signs = lower_precision_signs(default_run, capture())
    assert signs and all("TF32" in sign for sign in signs)


def test_tf32_kernel_names_are_lower_precision_only_where_the_settings_forbid_tf32():
    kernels = ["sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc", "ampere_fp16_s16816gemm_fp16_128x128"]
    assert len(precision_flags(kernels)) == 2
    assert precision_flags(kernels, tf32_allowed=True) == {f"lower-precision kernel: {kernels[1]}"}


def test_the_baseline_cache_key_includes_the_settings(defaults):
    cache = BaselineCache(TEST_PROBLEMS)
    benchmark_on = {**defaults.values, "cudnn.benchmark": True}
    keys = {cache.key(SMALL_LEAKY, "cpu", "eager", TimingConfig(), "kernelbench", settings) for settings in (defaults.values, benchmark_on)}
    assert len(keys) == 2


def test_result_records_the_settings_and_round_trips():
    result = Result("p.py", "c.py", backend_settings={"configured": {"cudnn.benchmark": False},
                                                      "candidate": {"cudnn.benchmark": True}})
    assert Result.from_json(result.to_json()) == result


# -- unstable baselines -------------------------------------------------------------------------

STEADY = TimingStats.from_samples([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0])
# The baseline the KernelBench comparison met: IQR about as large as the median.
WIDE = TimingStats.from_samples([0.5, 0.6, 1.67, 1.67, 1.7, 2.5, 2.6, 2.7])


def measured_in_turn(stats: list[TimingStats]):
    calls = []

    def measure() -> TimingStats:
        calls.append(stats[len(calls)])
        return calls[-1]
    return measure, calls


def test_a_steady_baseline_is_measured_once():
    measure, calls = measured_in_turn([STEADY])
    assert steadiest(measure, TimingConfig()) == STEADY and len(calls) == 1
    assert unstable_warning("eager", STEADY, TimingConfig()) is None


def test_a_wide_baseline_is_measured_again_until_it_is_steady():
    measure, calls = measured_in_turn([WIDE, STEADY, WIDE])
    assert steadiest(measure, TimingConfig()) == STEADY and len(calls) == 2


def test_a_baseline_that_stays_wide_is_flagged_with_mode_median_and_iqr():
    timing = TimingConfig()
    narrower = TimingStats.from_samples([1.0, 1.0, 1.5, 1.6, 1.67, 1.7, 2.5, 2.6])
    measure, calls = measured_in_turn([WIDE, narrower, WIDE])
    kept = steadiest(measure, timing)
    assert len(calls) == 1 + timing.baseline_remeasures and kept == narrower
    warning = unstable_warning("eager", kept, timing)
    assert warning.rule == "unstable_baseline"
    assert "eager" in warning.detail and f"median {kept.median_ms:.4g} ms" in warning.detail
    assert f"IQR {kept.iqr_ms:.4g} ms" in warning.detail


def test_a_baseline_timed_in_rounds_is_judged_by_how_steady_its_lower_decile_is():
    """A launch-bound eager baseline on a host of two speeds (a third of its calls at 2 ms, the
    rest at 3 ms): the IQR is a third of the median, but the speedup divides lower deciles and
    the calls around its lower decile agree, so in rounds it is not flagged; where the fast
    calls are too few to hold the decile still, it is."""
    two_speeds = TimingStats.from_samples([2.0, 2.01, 1.99, 2.0] * 10 + [3.0, 3.02, 2.98, 3.0] * 20)
    timing = TimingConfig()
    assert unstable_warning("eager", two_speeds, timing) is not None  # one round: the IQR
    assert unstable_warning("eager", two_speeds, timing, in_rounds=True) is None
    rare_fast = TimingStats.from_samples([1.0] * 6 + [2.0] * 6 + [3.0] * 88)
    warning = unstable_warning("eager", rare_fast, timing, in_rounds=True)
    assert warning.rule == "unstable_baseline" and "lower decile" in warning.detail


class FakeReferenceWorker:
    """Answers `baseline` requests with the given samples and records the settings asked for."""

    def __init__(self, samples_ms: list[float]):
        self.samples_ms = samples_ms
        self.asked: list[dict] = []

    def request(self, message, timeout_s):
        command, mode, indices, settings = message
        assert command == "baseline"
        self.asked.append(settings)
        return {"samples_ms": self.samples_ms, "device_ms": None, "launch_overlapped": False,
                "backend_settings": settings}


# The CPU backend judges no spread by default (config.py); these tests give it the GPU's bound.
JUDGED_ON_CPU = dataclasses.replace(QUICK_TIMING, cpu_unstable_spread=QUICK_TIMING.unstable_spread)


def baselines_under(settings: dict, worker: FakeReferenceWorker, cache_dir, timing=JUDGED_ON_CPU) -> Result:
    evaluation = Evaluation(SMALL_LEAKY, check_candidate(TEST_CANDIDATES / "pytorch_leaky_relu.py"),
                            cpu_config(baselines=("eager",), cache_dir=cache_dir, timing_config=timing), "cpu")
    evaluation.result.backend_settings = {"configured": settings, "candidate": settings}
    evaluation._time_baselines(worker)
    return evaluation.result


def test_a_cached_unstable_baseline_flags_every_result_that_uses_it(tmp_path, defaults):
    wide_samples = [0.5, 0.6, 1.67, 1.67, 1.7, 2.5, 2.6, 2.7]
    first = FakeReferenceWorker(wide_samples)
    result = baselines_under(defaults.values, first, tmp_path)
    assert len(first.asked) == 1 + QUICK_TIMING.baseline_remeasures
    assert [w.rule for w in result.warnings] == ["unstable_baseline"]
    later = FakeReferenceWorker([1.0] * 8)
    again = baselines_under(defaults.values, later, tmp_path)
    assert later.asked == [] and [w.rule for w in again.warnings] == ["unstable_baseline"]
    # Other settings are another cache entry, measured on first need, under those settings.
    benchmark_on = {**defaults.values, "cudnn.benchmark": True}
    other = baselines_under(benchmark_on, later, tmp_path)
    assert later.asked == [benchmark_on] and other.warnings == []


def test_the_cpu_backend_judges_no_baseline_spread_by_default(tmp_path, defaults):
    worker = FakeReferenceWorker([0.5, 0.6, 1.67, 1.67, 1.7, 2.5, 2.6, 2.7])
    result = baselines_under(defaults.values, worker, tmp_path, timing=QUICK_TIMING)
    assert len(worker.asked) == 1 and result.warnings == []


def test_the_leaderboards_input_carries_the_unstable_flag(tmp_path):
    result = Result("p.py", "c.py", status="passed", passed=True,
                    warnings=[Violation("unstable_baseline", "eager: median 1.67 ms, IQR 1.78 ms")])
    append_result(tmp_path / "results.jsonl", result)
    [read] = read_results(tmp_path / "results.jsonl")
    assert [w.rule for w in read.warnings] == ["unstable_baseline"]


# -- end to end on the CPU ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_candidate_that_flips_settings_is_timed_against_baselines_under_them_and_nothing_leaks(tmp_path):
    config = cpu_config(timing=True, baselines=("eager",), policy="permissive", cache_dir=tmp_path)
    flipped = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "flips_backend_settings.py", config)
    assert flipped.passed, flipped.summary() + flipped.log
    configured, timed_under = flipped.backend_settings["configured"], flipped.backend_settings["candidate"]
    assert configured["cudnn.benchmark"] is False and timed_under["cudnn.benchmark"] is True
    [changed] = [w for w in flipped.warnings if w.rule == "backend_settings_changed"]
    assert "cudnn.benchmark: False -> True" in changed.detail
    assert "cuda.matmul.allow_tf32: False -> True" in changed.detail
    assert any("TF32" in sign for sign in flipped.precision)  # beyond the run's settings
    # The eager baseline was measured under the candidate's settings (and cached by them).
    records = [json.loads(path.read_text()) for path in (tmp_path / "baselines").glob("*.json")]
    assert [record["backend_settings"] for record in records] == [timed_under]
    assert flipped.speedup_vs_eager is not None

    honest = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "pytorch_leaky_relu.py", config)
    assert honest.passed, honest.summary() + honest.log
    assert honest.backend_settings["candidate"] == honest.backend_settings["configured"] == configured
    assert not any(w.rule == "backend_settings_changed" for w in honest.warnings)
    assert honest.precision == []  # cuDNN's default TF32 is the run's setting, not the candidate's
    records = [json.loads(path.read_text()) for path in (tmp_path / "baselines").glob("*.json")]
    assert sorted(record["backend_settings"]["cudnn.benchmark"] for record in records) == [False, True]


def test_strict_fp32_is_the_configured_setting_on_both_sides(tmp_path):
    result = evaluate(SMALL_LEAKY, TEST_CANDIDATES / "pytorch_leaky_relu.py",
                      cpu_config(policy="permissive", backend="strict-fp32", cache_dir=tmp_path))
    assert result.passed, result.summary() + result.log
    configured = result.backend_settings["configured"]
    assert configured["cudnn.allow_tf32"] is False and configured["float32_matmul_precision"] == "highest"
