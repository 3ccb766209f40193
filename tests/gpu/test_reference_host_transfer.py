"""A host transfer the problem's own reference makes is the problem's, not the candidate's
(evaluation._as_the_reference_does): level3/33_VanillaRNN keeps its hidden state in a CPU tensor
attribute, copies the input's hidden state into it (device to host) and moves it back, and its
own code given as the candidate was `host_compute` on the H200. Written in that class, small; a
candidate that adds a host transfer of another kind to the same problem is still flagged."""

import pytest

from pytest_cudaagent import EvalConfig, evaluate

pytestmark = pytest.mark.gpu

HIDDEN_ON_THE_HOST = '''
import torch
import torch.nn as nn

batch_size, input_size, hidden_size, output_size = 8, 64, 32, 16


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((batch_size, hidden_size))  # a plain attribute: stays on the host
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x, initial_hidden=None):
        if initial_hidden is not None:
            self.hidden.copy_(initial_hidden)
        self.hidden = self.hidden.to(x.device)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.h2o(self.hidden)


def get_inputs():
    return [torch.rand(batch_size, input_size), torch.rand(batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size, output_size]
'''


def _pair(tmp_path, candidate_source: str):
    problem = tmp_path / "vanilla_rnn.py"
    problem.write_text(HIDDEN_ON_THE_HOST)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(candidate_source.replace("class Model(", "class ModelNew("))
    return problem, candidate


@pytest.mark.parametrize("policy", ["calibration", "permissive"])
def test_the_references_own_host_copy_is_a_warning(tmp_path, policy):
    problem, candidate = _pair(tmp_path, HIDDEN_ON_THE_HOST)
    result = evaluate(problem, candidate, EvalConfig(device="cuda", policy=policy, timing=False, cache_dir=tmp_path))
    assert "host_compute" not in {v.rule for v in result.violations}, result.summary()
    noted = [w for w in result.warnings if w.rule == "host_transfer_as_reference"]
    assert noted and "aten::copy_" in noted[0].detail
    if policy == "calibration":
        assert result.passed, result.summary()


def test_another_host_transfer_on_the_same_problem_is_still_host_compute(tmp_path):
    cheat = HIDDEN_ON_THE_HOST.replace(
        "        return self.h2o(self.hidden)\n",
        "        out = self.h2o(self.hidden).cpu()  # computed on, and handed back from, the host\n"
        "        return (out * 1.0).to(x.device)\n")
    problem, candidate = _pair(tmp_path, cheat)
    result = evaluate(problem, candidate, EvalConfig(device="cuda", policy="permissive", timing=False,
                                                     cache_dir=tmp_path))
    assert not result.passed and "host_compute" in {v.rule for v in result.violations}, result.summary()


def test_the_strict_policy_keeps_the_references_host_copy_a_violation(tmp_path):
    problem, candidate = _pair(tmp_path, HIDDEN_ON_THE_HOST)
    result = evaluate(problem, candidate, EvalConfig(device="cuda", policy="strict", timing=False, cache_dir=tmp_path))
    assert "host_compute" in {v.rule for v in result.violations}, result.summary()
