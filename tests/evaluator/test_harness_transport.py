"""The harness's own transport is not the candidate's verdict (#38).

On the H100, level1/100_HingeLoss with its own Model as the candidate got `runtime_error`
"forward failed: RuntimeError: unable to resize file </torch_...> to the right size: File too
large (27)": its 2 GiB inputs, too large for a snapshot on the device (outputs.SNAPSHOT_BUDGET_BYTES),
went back to the evaluator as new shared-memory copies, and the sandbox's file-size limit
(SandboxLimits.file_size_mb, RLIMIT_FSIZE, which covers shared-memory files too) refused the
copy. Here the limit is cut to 1 MiB and the inputs are 2 MiB: an input a call changes goes back
in the buffer it was lent in, so the check still sees the change and no file is made."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.core.config import SandboxLimits
from tests.helpers import cpu_config

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(1024, 512)]  # 2 MiB, over the 1 MiB file-size limit below


def get_init_inputs():
    return []
'''
# Published KernelBench solutions do this: an in-place activation on the input.
IN_PLACE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu_(x)
'''
HONEST = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


@pytest.fixture(autouse=True)
def private_gate(monkeypatch, tmp_path):
    monkeypatch.setattr("pytest_cudaagent.resources.memory_gate.gate_root", lambda: tmp_path / "gate")


@pytest.fixture
def config(tmp_path):
    limits = dataclasses.replace(SandboxLimits(), file_size_mb=1)
    return cpu_config(policy="permissive", trials=2, cache_dir=tmp_path / "cache", sandbox_limits=limits)


def pair(tmp_path, candidate: str):
    problem, path = tmp_path / "relu_2mib.py", tmp_path / "candidate.py"
    problem.write_text(PROBLEM)
    path.write_text(candidate)
    return problem, path


def test_a_changed_input_goes_back_in_its_lent_buffer_under_a_file_size_limit_below_its_size(tmp_path, config):
    result = evaluate(*pair(tmp_path, IN_PLACE), config)
    assert "unable to resize file" not in (result.error or ""), result.summary()
    assert "input_mutation" in {violation.rule for violation in result.violations + result.warnings}, result.summary()


def test_an_honest_candidate_passes_under_that_limit(tmp_path, config):
    result = evaluate(*pair(tmp_path, HONEST), config)
    assert result.passed, result.summary()


# -- the host-memory cap counts the candidate's memory, not the harness's copies in it ----------

BIG_PROBLEM = PROBLEM.replace("randn(1024, 512)]  # 2 MiB, over the 1 MiB file-size limit below",
                              "randn(4096, 4096)]  # 64 MiB")
HOARDER = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.hoard = []

    def forward(self, x):
        self.hoard.append(torch.ones(384, 1024, 1024, dtype=torch.uint8))  # 384 MiB a call, its own
        return torch.relu(x)
'''


def capped_pair(tmp_path, candidate: str):
    problem, path = tmp_path / "relu_64mib.py", tmp_path / "candidate.py"
    problem.write_text(BIG_PROBLEM)
    path.write_text(candidate)
    # Five trials: the reference holds five 128 MiB sets, the candidate's worker nine 64 MiB
    # outputs and their host copies (worker.forward, check_held), beside lent buffers: 1.6 GiB
    # of the harness's over a 1 GiB cap. The H100's level1/7_Matmul_with_small_K_dimension_
    # (nine 4 GiB outputs) and five level-1 references (five sets of 12-16 GiB) at 32 GiB.
    return problem, path, cpu_config(policy="permissive", trials=5, cache_dir=tmp_path / "cache", memory_cap_gb=1.0)


def test_the_harness_own_sets_and_copies_do_not_count_against_the_cap(tmp_path):
    problem, candidate, config = capped_pair(tmp_path, HONEST)
    result = evaluate(problem, candidate, config)
    assert result.passed, result.summary()


def test_the_candidates_own_memory_still_counts(tmp_path):
    problem, candidate, config = capped_pair(tmp_path, HOARDER)
    result = evaluate(problem, candidate, config)
    assert result.status == "crashed" and "over the cap of 1.0 GiB plus" in result.error, result.summary()
