"""The memory gate on a real GPU (issue #38): a candidate that runs out of device memory because
another evaluation holds it is retried with the GPU to itself and passes; one that asks for more
than the GPU has is the candidate's runtime_error, naming what it asked for; the reference's peak
is measured, kept, and makes the pair's footprint."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.footprints import FootprintStore
from tests.helpers import TEST_PROBLEMS

pytestmark = pytest.mark.gpu

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"
WAIT_S = 600
# leaky_relu with a workspace of WORKSPACE bytes taken in every call, as a kernel's scratch.
WORKSPACE_CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        workspace = torch.empty({workspace}, dtype=torch.uint8, device=x.device)
        workspace.zero_()
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
'''


def _hold_the_gpu(gate_root: str, leave_free_bytes: int, ready) -> None:
    """Another evaluation: registered at the gate, holding all but `leave_free_bytes` of the GPU
    until an evaluation waits to have the GPU to itself."""
    import torch

    from pytest_cudaagent.memory_gate import Gate

    gate = Gate("cuda", gate_root)
    with gate.shared("retry", "another evaluation"):
        free, _ = torch.cuda.mem_get_info()
        held = torch.empty(max(0, free - leave_free_bytes), dtype=torch.uint8, device="cuda")
        held.fill_(1)
        torch.cuda.synchronize()
        ready.set()
        deadline = time.monotonic() + WAIT_S
        while not gate.waiting_alone() and time.monotonic() < deadline:
            time.sleep(0.05)
        del held


@pytest.fixture(autouse=True)
def private_gate(monkeypatch, tmp_path):
    """A gate of this test's own: the GPU tests beside it evaluate at their own gates."""
    monkeypatch.setattr("pytest_cudaagent.memory_gate.gate_root", lambda: tmp_path / "gate")


def config(tmp_path) -> EvalConfig:
    return EvalConfig(device="cuda", policy="permissive", timing=False, trials=2, cache_dir=tmp_path / "cache")


def test_out_of_device_memory_held_by_another_evaluation_is_retried_alone_and_passes(tmp_path):
    candidate = tmp_path / "workspace_4g.py"
    candidate.write_text(WORKSPACE_CANDIDATE.format(workspace=4 << 30))
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    other = context.Process(target=_hold_the_gpu, args=(str(tmp_path / "gate"), 2 << 30, ready), daemon=True)
    other.start()
    try:
        assert ready.wait(WAIT_S)
        result = evaluate(SMALL_LEAKY, candidate, config(tmp_path))
    finally:
        other.join(WAIT_S)
    assert result.passed, result.summary() + result.log
    assert result.env["retried"]["why"].startswith("out of memory while 1 other evaluation(s) shared the device")
    assert result.env["memory"]["gate"] == "alone"


def test_asking_for_more_than_the_gpu_has_is_the_candidates_runtime_error(tmp_path):
    candidate = tmp_path / "workspace_200g.py"
    candidate.write_text(WORKSPACE_CANDIDATE.format(workspace=200 << 30))
    result = evaluate(SMALL_LEAKY, candidate, config(tmp_path))
    assert result.status == "runtime_error", result.summary()
    assert result.error.startswith("out of memory with the device to itself (asked for 200.00 GiB with ")
    assert "retried" not in result.env


def test_the_references_peak_is_kept_and_makes_the_footprint(tmp_path):
    candidate = tmp_path / "workspace_none.py"
    candidate.write_text(WORKSPACE_CANDIDATE.format(workspace=1))
    result = evaluate(SMALL_LEAKY, candidate, config(tmp_path))
    assert result.passed, result.summary()
    measures = FootprintStore(tmp_path / "cache").get(SMALL_LEAKY, "cuda")
    assert measures is not None and measures.device_peak_bytes >= 2 * 256 * 512 * 4
    assert result.env["memory"]["footprint"]["device_gib"] > 1.0  # two CUDA contexts at least
    again = evaluate(SMALL_LEAKY, candidate, config(tmp_path))
    assert again.env["memory"]["admitted"] == "alone on the device"
