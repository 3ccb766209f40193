"""`--timeout` is the candidate's: each of the reference's steps gets at least
REFERENCE_TIMEOUT_FLOOR_S (EvalConfig.reference_timeout_s). On the 2-core CI machine a reference's
start beside a looping candidate and a neighbour's compilers took over 15 s, and `--timeout 15`
made a problem_error of what was the candidate's timeout."""

from __future__ import annotations

import pytest

from pytest_cudaagent import EvalConfig, ProblemError, evaluate
from pytest_cudaagent.core import config as config_module
from tests.helpers import cpu_config

SLOW_REFERENCE = """import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        time.sleep({seconds})  # a slow start: the reference's, not the candidate's

    def forward(self, x):
        return x * 2.0


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
"""

CANDIDATE = """import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2.0
"""


def write_pair(tmp_path, seconds: float):
    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(SLOW_REFERENCE.format(seconds=seconds))
    candidate.write_text(CANDIDATE)
    return problem, candidate


def test_the_reference_gets_the_floor_whatever_the_timeout():
    assert EvalConfig(run_timeout_s=15).reference_timeout_s == config_module.REFERENCE_TIMEOUT_FLOOR_S
    assert EvalConfig(run_timeout_s=900).reference_timeout_s == 900  # a longer timeout holds for both


@pytest.mark.slow
def test_a_reference_slower_than_the_candidates_timeout_is_still_evaluated(tmp_path):
    problem, candidate = write_pair(tmp_path, seconds=5)
    result = evaluate(problem, candidate, cpu_config(policy="permissive", run_timeout_s=2))
    assert result.status == "passed", result.summary() + result.log


@pytest.mark.slow
def test_a_reference_past_the_floor_is_the_problems_error(tmp_path, monkeypatch):
    monkeypatch.setattr(config_module, "REFERENCE_TIMEOUT_FLOOR_S", 3.0)
    problem, candidate = write_pair(tmp_path, seconds=60)
    with pytest.raises(ProblemError, match=r"the reference timed out \(no answer within 3 s\)"):
        evaluate(problem, candidate, cpu_config(policy="permissive", run_timeout_s=1))
