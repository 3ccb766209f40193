"""The evaluating process's torch threads: its share of the cores while it evaluates (#41: each
parallel region woke a thread per core that spun on after it, in every process of a batch)."""

from __future__ import annotations

import sys

import pytest
import torch

from pytest_cudaagent import EvalConfig, evaluation
from pytest_cudaagent.system import cores
from tests.helpers import CPU_CANDIDATES, PROBLEMS


@pytest.fixture
def sixteen_threads(monkeypatch):
    """A 16-core machine whose torch pool has a thread per core; set back after the test."""
    before = torch.get_num_threads()
    monkeypatch.setattr(cores, "usable_cores", lambda: 16)
    torch.set_num_threads(16)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("workers", "share"), [("8", 2), ("16", 1), ("32", 1), ("3", 5)])
def test_a_bench_worker_holds_its_share_of_the_cores_and_sets_the_pool_back(monkeypatch, sixteen_threads,
                                                                              workers, share):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    with cores.evaluating_threads() as inside:
        assert inside == share == torch.get_num_threads()
    assert torch.get_num_threads() == 16


@pytest.mark.parametrize("workers", [None, "", "many"])
def test_a_process_evaluating_alone_keeps_its_pool(monkeypatch, sixteen_threads, workers):
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    with cores.evaluating_threads() as inside:
        assert inside == 16 == torch.get_num_threads()
    assert torch.get_num_threads() == 16


def test_the_pool_is_set_back_when_the_evaluation_raises(monkeypatch, sixteen_threads):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    with pytest.raises(RuntimeError), cores.evaluating_threads():
        raise RuntimeError("an error of the evaluation")
    assert torch.get_num_threads() == 16


def test_evaluate_runs_the_pair_with_the_share_and_gives_the_caller_its_pool_back(monkeypatch, sixteen_threads):
    """A trainer calling evaluate() in its own process keeps its own torch settings after."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "8")
    seen = []

    def at_the_gate(problem, candidate, config, device):
        seen.append(torch.get_num_threads())
        return "the result"

    monkeypatch.setattr(evaluation, "_evaluate_at_the_gate", at_the_gate)
    answer = evaluation.evaluate(PROBLEMS / "leaky_relu.py", CPU_CANDIDATES / "leaky_relu.py", EvalConfig(device="cpu"))
    assert answer == "the result" and seen == [2]
    assert torch.get_num_threads() == 16


def test_capping_torchs_threads_only_lowers_them_and_says_what_they_were(monkeypatch, sixteen_threads):
    """The one cap both the evaluating process and a timed hold (host_quiet) use."""
    assert cores.cap_torch_threads(4) == 16 and torch.get_num_threads() == 4
    assert cores.cap_torch_threads(8) == 4 and torch.get_num_threads() == 4  # never raised
    monkeypatch.delitem(sys.modules, "torch")
    assert cores.cap_torch_threads(1) is None  # a process that has not loaded torch is left alone
