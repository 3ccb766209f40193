"""The memory gate on a real GPU (issue #38): CUDA's own out-of-memory error while another
evaluation shares the device is retried with the GPU to itself and passes; with the GPU to itself
it is the candidate's runtime_error, naming what it asked for; the reference's peak is measured,
kept, and makes the pair's footprint. The other evaluation is a thread holding this test's own
gate, and the device is "full" while a marker file says so: the candidate then asks for more than
any GPU has. Nothing here fills the GPU, so the GPU tests beside it run as they would alone."""

from __future__ import annotations

import threading
import uuid

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.resources.footprints import FootprintStore
from pytest_cudaagent.resources.memory_gate import Gate
from tests.helpers import TEST_PROBLEMS

pytestmark = pytest.mark.gpu

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"
WAIT_S = 600
# leaky_relu that asks for a 200 GiB workspace while the marker `full` is there, leaving `asked`
# behind (unsandboxed, `config`: no path is shared by a sandboxed candidate and anyone else).
CANDIDATE = '''
import os
import torch
import torch.nn as nn

MARKERS = {markers!r}


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        if os.path.exists(os.path.join(MARKERS, "full")):
            open(os.path.join(MARKERS, "asked"), "a").close()
            torch.empty(200 << 30, dtype=torch.uint8, device=x.device)
        return torch.nn.functional.leaky_relu(x, self.negative_slope)
'''


@pytest.fixture(autouse=True)
def private_gate(monkeypatch, tmp_path):
    """A gate of this test's own: the GPU tests beside it evaluate at the machine's."""
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.gate_root", lambda: tmp_path / "gate")


@pytest.fixture
def markers(tmp_path):
    path = tmp_path / f"gpu-oom-test-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


def config(tmp_path) -> EvalConfig:
    return EvalConfig(device="cuda", policy="permissive", timing=False, trials=2, cache_dir=tmp_path / "cache",
                      sandbox=False)


def test_cudas_out_of_memory_while_another_evaluation_shares_the_gpu_is_retried_alone_and_passes(
        tmp_path, markers):
    candidate = tmp_path / "asks_when_full.py"
    candidate.write_text(CANDIDATE.format(markers=str(markers)))
    gate, holding, done = Gate("cuda"), threading.Event(), threading.Event()

    def another_evaluation() -> None:
        with gate.shared("retry", "another evaluation"):
            (markers / "full").touch()
            holding.set()
            while not done.wait(0.05):
                if (markers / "asked").exists() and gate.waiting_alone():
                    break
            (markers / "full").unlink()

    other = threading.Thread(target=another_evaluation, daemon=True)
    other.start()
    assert holding.wait(WAIT_S)
    try:
        result = evaluate(SMALL_LEAKY, candidate, config(tmp_path))
    finally:
        done.set()
        other.join(WAIT_S)
    assert result.passed, result.summary() + result.log
    assert result.env["retried"]["why"].startswith("out of memory while 1 other evaluation(s) shared the device")
    assert "Tried to allocate 200.00 GiB" in result.env["retried"]["why"]
    assert result.env["memory"]["gate"] == "alone"


def test_asking_for_more_than_the_gpu_has_is_the_candidates_runtime_error(tmp_path, markers):
    candidate = tmp_path / "asks_when_full.py"
    candidate.write_text(CANDIDATE.format(markers=str(markers)))
    (markers / "full").touch()
    result = evaluate(SMALL_LEAKY, candidate, config(tmp_path))
    assert result.status == "runtime_error", result.summary()
    assert result.error.startswith("out of memory with the device to itself (asked for 200.00 GiB with ")
    assert "retried" not in result.env


def test_the_references_peak_is_kept_and_makes_the_footprint(tmp_path, markers):
    candidate = tmp_path / "asks_when_full.py"
    candidate.write_text(CANDIDATE.format(markers=str(markers)))
    result = evaluate(SMALL_LEAKY, candidate, config(tmp_path))
    assert result.passed, result.summary()
    measures = FootprintStore(tmp_path / "cache").get(SMALL_LEAKY, "cuda")
    assert measures is not None and measures.device_peak_bytes >= 2 * 256 * 512 * 4
    assert result.env["memory"]["footprint"]["device_gib"] > 1.0  # two CUDA contexts at least
    assert "reference.sizes" in result.profile
    again = evaluate(SMALL_LEAKY, candidate, config(tmp_path))
    assert again.env["memory"]["admitted"] == "alone on the device" and "reference.sizes" not in again.profile
