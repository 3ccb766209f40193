"""One task built to fail each runtime filter, and honest tasks that pass."""

import dataclasses

import pytest

from synthesis.filters import batch_size_of, check_task, with_batch_size

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
