"""One task built to fail each runtime filter, and honest tasks that pass."""

import dataclasses
import threading
import time

import pytest
import torch

from pytest_cudaagent.timing.locks import device_lock
from synthesis.filters import (
    LoadedTask,
    batch_size_of,
    check_task,
    compare_in_chunks,
    with_batch_size,
)

TEMPLATE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64))

    def forward(self, x):
        {body}


batch_size = {batch}


def get_inputs():
    return [torch.randn(batch_size, 64)]


def get_init_inputs():
    return []
'''


def task(body: str, batch: int = 8) -> str:
    return TEMPLATE.format(body=body, batch=batch)


HONEST = task("return torch.tanh(x * self.w).cumsum(dim=-1)")


def test_honest_task_is_kept(cpu_filters):
    outcome = check_task(HONEST, cpu_filters)
    assert outcome.kept, outcome.details
    assert outcome.reasons == []
    assert set(outcome.checks) == {"eager", "deterministic", "degenerate", "workload"}
    assert outcome.eager_ms > 0 and outcome.output_shapes == [[outcome.batch_size, 64]]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("return x @ torch.ones(3, 3)", "eager_error"),
        ("return 3", "bad_output"),
        ("return (x > 0).long()", "bad_output"),
        ("return torch.log(x)", "nan_or_inf"),
        ("return x / (x - x)", "nan_or_inf"),
        ("return x + torch.randn_like(x)", "nondeterministic"),
        ("return torch.nn.functional.dropout(x, 0.5, training=True)", "nondeterministic"),
        ("return x - x", "constant_output"),
        ("return torch.relu(-torch.abs(x))", "constant_output"),
        ("return torch.softmax(x, dim=-1).sum(dim=-1, keepdim=True) + 1e-4 * x.mean()", "nearly_constant_output"),
        ("return torch.sigmoid(x * 1e4).clamp(0.999, 1.0) + 0 * x", "nearly_constant_output"),
        ("return self.w.expand(x.shape[0], -1) + 0 * x", "input_independent"),
    ],
)
def test_task_built_to_fail_is_dropped_for_that_reason(cpu_filters, body, reason):
    outcome = check_task(task(body), cpu_filters)
    assert not outcome.kept
    assert outcome.reasons == [reason], outcome.details
    assert outcome.details[reason]


def test_workload_scales_the_batch_up_into_the_window(cpu_filters):
    config = dataclasses.replace(cpu_filters, min_ms=2.0, max_ms=1e5)
    outcome = check_task(task("return torch.tanh(x)", batch=1), config)
    assert outcome.batch_size > 1  # scaled up from 1
    assert batch_size_of(outcome.source) == outcome.batch_size


def test_too_slow_even_at_batch_one_is_dropped(cpu_filters):
    config = dataclasses.replace(cpu_filters, min_ms=1e-9, max_ms=1e-8)
    outcome = check_task(task("return torch.tanh(x)", batch=64), config)
    assert outcome.reasons == ["workload_too_slow"]
    assert outcome.batch_size == 1  # it tried the smallest batch first


def test_too_fast_without_a_batch_knob_is_dropped(cpu_filters):
    config = dataclasses.replace(cpu_filters, min_ms=1e6, max_ms=1e7)
    source = task("return torch.tanh(x)").replace("batch_size = 8", "").replace("batch_size", "8")
    outcome = check_task(source, config)
    assert outcome.reasons == ["workload_too_fast"]
    assert "no module-level `batch_size = N`" in outcome.details["workload_too_fast"]


def test_batch_knob_rewrite():
    source = task("return x", batch=8)
    assert batch_size_of(source) == 8
    assert batch_size_of(with_batch_size(source, 512)) == 512
    assert "batch_size = 512" in with_batch_size(source, 512)


@pytest.mark.slow
def test_compile_filter_runs_torch_compile_and_compares(cpu_filters):
    """The real torch.compile (inductor, C++ on the CPU): an honest task passes with a compile
    time; a task that computes something else when compiled is dropped."""
    config = dataclasses.replace(cpu_filters, compile=True)
    outcome = check_task(HONEST, config)
    assert outcome.kept, outcome.details
    assert outcome.checks["compile"] == "pass" and outcome.compile_ms > 0
    two_faced = task("return x * (3.0 if torch.compiler.is_compiling() else 1.0) + self.w")
    outcome = check_task(two_faced, config)
    assert outcome.reasons == ["compile_mismatch"], outcome.details


def test_compile_error_is_named(cpu_filters):
    """A custom operator without a fake (meta) implementation runs eagerly but cannot be traced."""
    config = dataclasses.replace(cpu_filters, compile=True)
    custom_op = (
        "@torch.library.custom_op('synthtest::twice', mutates_args=())\n"
        "def twice(x: torch.Tensor) -> torch.Tensor:\n    return x * 2\n\n\nclass Model"
    )
    source = task("return twice(torch.tanh(x) * self.w)").replace("class Model", custom_op, 1)
    outcome = check_task(source, config)
    assert outcome.reasons == ["compile_error"], outcome.details


def test_a_batch_above_the_accepted_estimates_is_scaled_down_toward_the_floor(cpu_filters):
    """The CPU window is 1e-4 ms to 1e5 ms, so the search aims at 2e-4 ms: any real forward is
    above that, and a task inside the window is still brought down to batch 1 (the floor)."""
    low, high = cpu_filters.accepted_estimate_ms
    assert cpu_filters.min_ms < low <= cpu_filters.target_ms < high < cpu_filters.max_ms
    outcome = check_task(task("return torch.tanh(x * self.w).cumsum(dim=-1)", batch=512), cpu_filters)
    assert outcome.kept, outcome.details
    assert outcome.batch_size == 1


def test_workload_scaling_stops_at_the_memory_ceiling(cpu_filters):
    """One sample needs 512 bytes (a 64-float input and a 64-float output), so 64 KiB allows a
    batch of 128; the window's floor is out of reach, so the search would go on without it."""
    config = dataclasses.replace(cpu_filters, min_ms=1e3, max_ms=1e4, max_task_bytes=64 << 10)
    outcome = check_task(task("return torch.tanh(x)", batch=8), config)
    assert outcome.reasons == ["workload_too_fast"]
    assert outcome.batch_size == 128


def test_scaled_tasks_are_built_on_the_device(cpu_filters, tmp_path):
    """A scaled load draws its inputs and builds its model where they will run, never on the host
    first: on the meta device, inputs that would need 4 TiB of host memory load at once."""
    huge = TEMPLATE.format(body="return x", batch=1 << 34)
    loaded = LoadedTask(huge, dataclasses.replace(cpu_filters, device="meta"), tmp_path,
                        input_sets=1, on_device=True)
    assert len(loaded.input_sets) == 1
    assert loaded.input_sets[0][0].device.type == "meta" and loaded.input_sets[0][0].shape[0] == 1 << 34
    assert loaded.model.w.device.type == "meta"


def test_out_of_memory_is_its_own_reason(cpu_filters):
    outcome = check_task(task("raise torch.OutOfMemoryError('no room')"), cpu_filters)
    assert outcome.reasons == ["out_of_memory"]
    assert "eager" in outcome.details["out_of_memory"]


def test_compare_in_chunks_finds_a_difference_in_the_last_chunk():
    expected = [torch.zeros(10, 10), torch.ones(7)]
    assert compare_in_chunks(expected, [t.clone() for t in expected], chunk=16) is None
    changed = [expected[0].clone(), expected[1].clone()]
    changed[1][-1] = 5.0
    assert compare_in_chunks(expected, changed, chunk=16).startswith("1 of 107 elements")
    assert "shape" in compare_in_chunks(expected, [expected[0], torch.ones(8)], chunk=16)


def test_stages_are_heard_and_lock_waits_counted(cpu_filters, tmp_path, monkeypatch):
    """Each stage start reaches on_stage (with the batch search's notes), and time spent waiting
    for another process's timing shows in lock_wait_seconds."""
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path))
    heard: list[tuple[str, str]] = []
    workload_started = threading.Event()

    def on_stage(stage: str, detail: str) -> None:
        heard.append((stage, detail))
        if stage == "workload":
            workload_started.set()

    def hold_the_lock() -> None:
        with device_lock("cpu"):  # another process's timing: the eager stage's runs wait for it
            holding.set()
            time.sleep(0.5)

    holding = threading.Event()
    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    holding.wait(10)
    outcome = check_task(HONEST, cpu_filters, on_stage=on_stage)
    holder.join()
    assert outcome.kept, outcome.details
    assert [stage for stage, _ in heard if not _] == ["eager", "deterministic", "degenerate", "workload"]
    assert any(stage == "workload" and detail.startswith("batch 8:") for stage, detail in heard)
    assert outcome.lock_wait_seconds > 0.1
    assert set(outcome.filter_seconds) == {"eager", "deterministic", "degenerate", "workload"}


def test_an_error_at_a_scaled_batch_drops_the_task_with_its_reason(cpu_filters):
    """Some kernels have size limits that only a scaled batch meets: the task is dropped as an
    eager error, not left to crash its worker."""
    config = dataclasses.replace(cpu_filters, min_ms=1e3, max_ms=1e4)
    source = task("assert x.shape[0] <= 8, 'too big'\n        return torch.tanh(x * self.w)")
    outcome = check_task(source, config)
    assert outcome.reasons == ["eager_error"]
    assert outcome.details["eager_error"].startswith("while scaling the batch: AssertionError")
    assert outcome.checks["workload"] == "fail"
