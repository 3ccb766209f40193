"""The persisting-L2 guard: reset order and read-back with a fake driver; the ctypes layouts and
constants against CUDA's own headers; a no-op on the CPU."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from pytest_cudaagent.core.config import TimingConfig
from pytest_cudaagent.rules import l2_persistence
from pytest_cudaagent.rules.l2_persistence import (
    ACCESS_PROPERTY_NORMAL,
    ACCESS_PROPERTY_PERSISTING,
    ACCESS_PROPERTY_STREAMING,
    CLEARED_WINDOW,
    AccessPolicyWindow,
    CudaError,
    DriverL2,
    NoPersistenceGuard,
    PersistenceGuard,
    StreamAttrValue,
    Window,
    guard_for,
    persistence_guard,
)
from pytest_cudaagent.timing.timer import Clock, Timer

TIMING_STREAM = 0x5000
PERSISTING_WINDOW = Window(0x7F00_0000, 16 << 20, 1.0, ACCESS_PROPERTY_PERSISTING, ACCESS_PROPERTY_STREAMING)


class FakeDriver:
    """Stands in for DriverL2: device state a candidate may change, and a log of the calls."""

    def __init__(self, limit_error: int | None = None, window_error: int | None = None):
        self.limit = 0
        self.windows: dict[int, Window] = {}
        self.persisting_lines = False
        self.calls: list[tuple] = []
        self.limit_error, self.window_error = limit_error, window_error

    def persisting_limit(self) -> int:
        if self.limit_error is not None:
            raise CudaError("cuCtxGetLimit", self.limit_error)
        return self.limit

    def set_persisting_limit(self, nbytes: int) -> None:
        self.calls.append(("set_limit", nbytes))
        self.limit = nbytes

    def window(self, stream: int) -> Window:
        if self.window_error is not None:
            raise CudaError("cuStreamGetAttribute", self.window_error)
        return self.windows.get(stream, CLEARED_WINDOW)

    def set_window(self, stream: int, window: Window) -> None:
        self.calls.append(("set_window", stream, window))
        self.windows[stream] = window

    def reset_persisting_lines(self) -> None:
        self.calls.append(("reset_lines",))
        self.persisting_lines = False


def make_guard(driver: FakeDriver) -> PersistenceGuard:
    guard = guard_for(driver, TIMING_STREAM, lambda: driver.calls.append(("synchronize",)))
    assert isinstance(guard, PersistenceGuard)
    return guard


def test_reset_waits_for_queued_work_then_zeroes_carve_out_and_window_then_demotes_lines():
    driver = FakeDriver()
    driver.limit, driver.windows[TIMING_STREAM], driver.persisting_lines = 30 << 20, PERSISTING_WINDOW, True
    make_guard(driver).reset()
    assert driver.calls == [("synchronize",), ("set_limit", 0), ("set_window", TIMING_STREAM, CLEARED_WINDOW),
                            ("reset_lines",)]
    assert driver.limit == 0 and not driver.persisting_lines


def test_carve_out_left_after_a_call_is_an_l2_persistence_violation_naming_its_size():
    driver = FakeDriver()
    guard = make_guard(driver)
    guard.reset()
    driver.limit = 30 << 20  # what the candidate's forward did
    guard.check("timed")
    guard.check("timed")  # the same finding twice is reported once
    violations = guard.drain()
    assert [v.rule for v in violations] == ["l2_persistence"]
    assert str(30 << 20) in violations[0].detail and "timed call" in violations[0].detail
    assert guard.drain() == []


def test_persisting_window_on_the_timing_stream_is_a_violation_on_its_own():
    driver = FakeDriver()
    guard = make_guard(driver)
    driver.windows[TIMING_STREAM] = PERSISTING_WINDOW
    guard.check("profiled")
    [violation] = guard.drain()
    assert violation.rule == "l2_persistence" and "window" in violation.detail and "profiled" in violation.detail


@pytest.mark.parametrize("window", [
    CLEARED_WINDOW,
    Window(0x7F00_0000, 16 << 20, 1.0, ACCESS_PROPERTY_STREAMING, ACCESS_PROPERTY_STREAMING),
    Window(0x7F00_0000, 16 << 20, 0.0, ACCESS_PROPERTY_PERSISTING, ACCESS_PROPERTY_NORMAL),
])
def test_windows_that_persist_nothing_and_a_zero_carve_out_pass(window):
    driver = FakeDriver()
    guard = make_guard(driver)
    driver.windows[TIMING_STREAM] = window
    guard.check("timed")
    assert guard.drain() == []


def test_a_window_on_another_stream_is_not_read_but_its_carve_out_is():
    """The carve-out is device-wide and every persisting line needs it."""
    driver = FakeDriver()
    guard = make_guard(driver)
    driver.windows[TIMING_STREAM + 1] = PERSISTING_WINDOW
    guard.check("timed")
    assert guard.drain() == []
    driver.limit = 1 << 20
    guard.check("timed")
    assert [v.rule for v in guard.drain()] == ["l2_persistence"]


def test_a_carve_out_set_and_cleared_inside_forward_passes():
    driver = FakeDriver()
    guard = make_guard(driver)
    guard.reset()
    driver.set_persisting_limit(30 << 20)  # forward: set, use, clean up
    driver.set_window(TIMING_STREAM, PERSISTING_WINDOW)
    driver.set_window(TIMING_STREAM, CLEARED_WINDOW)
    driver.set_persisting_limit(0)
    guard.check("timed")
    assert guard.drain() == []


@pytest.mark.parametrize("code", [215, 801])  # CUDA_ERROR_UNSUPPORTED_LIMIT, CUDA_ERROR_NOT_SUPPORTED
def test_a_device_without_carve_out_gets_no_guard(code):
    assert isinstance(guard_for(FakeDriver(limit_error=code), TIMING_STREAM, lambda: None), NoPersistenceGuard)


def test_other_driver_errors_are_raised_not_hidden():
    with pytest.raises(CudaError, match="CUDA error 700"):
        guard_for(FakeDriver(limit_error=700), TIMING_STREAM, lambda: None)


def test_a_stream_that_takes_no_window_still_has_its_carve_out_reset_and_read():
    driver = FakeDriver(window_error=400)
    guard = make_guard(driver)
    assert not guard.windows
    guard.reset()
    assert driver.calls == [("synchronize",), ("set_limit", 0), ("reset_lines",)]
    driver.limit = 1 << 20
    guard.check("timed")
    assert [v.rule for v in guard.drain()] == ["l2_persistence"]


def test_cpu_timer_has_a_no_op_guard_and_measures_as_before():
    timer = Timer(Clock("cpu"), TimingConfig(warmup_ms=1, repeat_ms=2, min_samples=3, max_samples=6, rotating_inputs=2))
    assert isinstance(timer.persistence, NoPersistenceGuard)
    assert isinstance(persistence_guard("cpu", 0, lambda: None), NoPersistenceGuard)
    content = [[torch.randn(8)], [torch.randn(8)]]
    measurement = timer.measure(torch.relu, content)
    assert len(measurement.samples_ms) >= 3 and timer.persistence.drain() == []


# -- the ctypes declarations against CUDA's headers ------------------------------------------------

_LAYOUT_PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include <cuda.h>
#include <driver_types.h>
int main(void) {
  printf("window_size %zu\n", sizeof(CUaccessPolicyWindow));
  printf("base_ptr %zu\n", offsetof(CUaccessPolicyWindow, base_ptr));
  printf("num_bytes %zu\n", offsetof(CUaccessPolicyWindow, num_bytes));
  printf("hitRatio %zu\n", offsetof(CUaccessPolicyWindow, hitRatio));
  printf("hitProp %zu\n", offsetof(CUaccessPolicyWindow, hitProp));
  printf("missProp %zu\n", offsetof(CUaccessPolicyWindow, missProp));
  printf("runtime_window_size %zu\n", sizeof(struct cudaAccessPolicyWindow));
  printf("runtime_missProp %zu\n", offsetof(struct cudaAccessPolicyWindow, missProp));
  printf("value_size %zu\n", sizeof(CUstreamAttrValue));
  printf("value_align %zu\n", _Alignof(CUstreamAttrValue));
  printf("runtime_value_size %zu\n", sizeof(cudaStreamAttrValue));
  printf("window_in_value %zu\n", offsetof(CUstreamAttrValue, accessPolicyWindow));
  printf("limit %d %d\n", (int)CU_LIMIT_PERSISTING_L2_CACHE_SIZE, (int)cudaLimitPersistingL2CacheSize);
  printf("attribute %d %d\n", (int)CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, (int)cudaStreamAttributeAccessPolicyWindow);
  printf("normal %d %d\n", (int)CU_ACCESS_PROPERTY_NORMAL, (int)cudaAccessPropertyNormal);
  printf("streaming %d %d\n", (int)CU_ACCESS_PROPERTY_STREAMING, (int)cudaAccessPropertyStreaming);
  printf("persisting %d %d\n", (int)CU_ACCESS_PROPERTY_PERSISTING, (int)cudaAccessPropertyPersisting);
  printf("unsupported_limit %d\n", (int)CUDA_ERROR_UNSUPPORTED_LIMIT);
  printf("not_supported %d\n", (int)CUDA_ERROR_NOT_SUPPORTED);
  return 0;
}
"""


def _cuda_include() -> Path | None:
    from torch.utils.cpp_extension import CUDA_HOME

    for root in (CUDA_HOME, "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include"
    return None


@pytest.fixture(scope="module")
def header_layout(tmp_path_factory) -> dict[str, list[int]]:
    include, compiler = _cuda_include(), shutil.which("gcc")
    if include is None or compiler is None:
        pytest.skip("needs gcc and CUDA's headers (cuda.h) to compare the layouts with")
    folder = tmp_path_factory.mktemp("layout")
    (folder / "layout.c").write_text(_LAYOUT_PROGRAM)
    subprocess.run([compiler, "-std=c11", f"-I{include}", "layout.c", "-o", "layout"], cwd=folder, check=True)
    printed = subprocess.run([str(folder / "layout")], capture_output=True, text=True, check=True).stdout
    return {name: [int(value) for value in values] for name, *values in map(str.split, printed.splitlines())}


def test_access_policy_window_matches_the_headers(header_layout):
    assert header_layout["window_size"] == header_layout["runtime_window_size"] == [ctypes.sizeof(AccessPolicyWindow)]
    for field in ("base_ptr", "num_bytes", "hitRatio", "hitProp", "missProp"):
        assert header_layout[field] == [getattr(AccessPolicyWindow, field).offset], field
    assert header_layout["runtime_missProp"] == header_layout["missProp"]


def test_stream_attribute_union_matches_the_headers(header_layout):
    assert header_layout["value_size"] == header_layout["runtime_value_size"] == [ctypes.sizeof(StreamAttrValue)]
    assert header_layout["value_align"] == [ctypes.alignment(StreamAttrValue)]
    assert header_layout["window_in_value"] == [StreamAttrValue.accessPolicyWindow.offset]


def test_constants_match_driver_and_runtime_headers(header_layout):
    assert header_layout["limit"] == [l2_persistence.CU_LIMIT_PERSISTING_L2_CACHE_SIZE] * 2
    assert header_layout["attribute"] == [l2_persistence.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW] * 2
    assert header_layout["normal"] == [ACCESS_PROPERTY_NORMAL] * 2
    assert header_layout["streaming"] == [ACCESS_PROPERTY_STREAMING] * 2
    assert header_layout["persisting"] == [ACCESS_PROPERTY_PERSISTING] * 2
    assert header_layout["unsupported_limit"] + header_layout["not_supported"] == list(l2_persistence.NO_CARVE_OUT_ERRORS)


# -- the real driver ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_driver_reads_back_a_carve_out_and_window_and_the_guard_clears_them():
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("no persisting L2 before Ampere")
    buffer = torch.empty(1 << 20, device="cuda")  # makes the context current, as the worker's setup does
    controls, side = DriverL2(), torch.cuda.Stream()
    controls.set_persisting_limit(torch.cuda.get_device_properties().L2_cache_size // 2)
    controls.set_window(side.cuda_stream, Window(buffer.data_ptr(), buffer.nbytes, 1.0, ACCESS_PROPERTY_PERSISTING,
                                                 ACCESS_PROPERTY_STREAMING))
    assert controls.persisting_limit() > 0
    assert controls.window(side.cuda_stream).persists()
    guard = PersistenceGuard(controls, side.cuda_stream, torch.cuda.synchronize)
    guard.check("timed")
    assert len(guard.drain()) == 2
    guard.reset()
    assert controls.persisting_limit() == 0 and not controls.window(side.cuda_stream).persists()
    guard.check("timed")
    assert guard.drain() == []


@pytest.mark.gpu
def test_the_timing_stream_takes_a_window():
    """torch's default stream is the legacy stream (handle 0): the guard must be able to clear a
    window there, or it falls back to the carve-out alone (guard.windows False)."""
    clock = Clock("cuda")
    guard = Timer(clock, TimingConfig()).persistence
    assert isinstance(guard, PersistenceGuard) and guard.windows, clock.timing_stream_handle()
