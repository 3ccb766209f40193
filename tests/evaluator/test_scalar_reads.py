"""`.item()` and `float(t)` under the dispatch audit (guards.ModelConstants): a scalar read of
the model's own state (its parameters, buffers, tensor attributes, and what PyTorch computed
from them alone) is not `host_compute` under the permissive policy; a read of anything computed
from the inputs, or of memory whose content the audit cannot vouch for, is, under every policy."""

import torch
import torch.nn as nn

from pytest_cudaagent.rules.guards import ForwardGuard
from pytest_cudaagent.rules.rules import get_policy


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(1.5))
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("running", torch.ones(4))
        self.cache = {"bias": torch.full((4,), 0.25)}
        self.scratch = torch.zeros(4)


def rules_seen(policy: str, call, model: nn.Module) -> set[str]:
    guard = ForwardGuard(get_policy(policy), "cpu", watch_host=False, model_of=lambda: model)
    with torch.no_grad():  # as the worker calls forward
        guard(call)
    return {violation.rule for violation in guard.findings.drain()}


def test_reads_of_the_models_own_state_are_allowed_under_permissive():
    model = Scaled()
    for read in (lambda: model.scale.item(), lambda: float(model.scale), lambda: model.weight[1, 2].item(),
                 lambda: model.running.sum().item(), lambda: (model.scale * 2 + model.weight.mean()).item(),
                 lambda: model.cache["bias"][0].item(), lambda: model.scale.detach().abs().item()):
        assert rules_seen("permissive", read, model) == set()
        assert "host_compute" in rules_seen("strict", read, model)


def test_reads_of_what_the_inputs_reach_are_host_compute_under_every_policy():
    model = Scaled()
    x = torch.randn(4)

    def written_by_the_input():
        model.scratch.copy_(x)  # the model's own buffer, now holding the input
        return model.scratch[0].item()

    def fresh_allocation():
        return torch.empty(1).fill_(2.0).item()  # no model state went in

    for read in (lambda: x.sum().item(), lambda: (model.scale * x).sum().item(), lambda: float(x[0]),
                 written_by_the_input, fresh_allocation):
        assert rules_seen("permissive", read, model) == {"host_compute"}
        assert "host_compute" in rules_seen("strict", read, model)


def test_without_a_model_every_scalar_read_is_host_compute():
    guard = ForwardGuard(get_policy("permissive"), "cpu", watch_host=False)
    guard(lambda: torch.tensor(2.0).item())
    assert {violation.rule for violation in guard.findings.drain()} == {"host_compute"}


# A problem whose own forward reads a scalar of its input (a normalisation by the input's peak,
# as some KernelBench references do with `.item()`; level3/33_VanillaRNN moves a tensor
# attribute through the host instead, the GPU form in tests/gpu/test_reference_host_transfer.py).
PEAK_NORMALISED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x / float(x.abs().max())


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''
# The same scalar read, on a problem whose reference makes none: still host_compute.
PLAIN_SCALE = PEAK_NORMALISED.replace("x / float(x.abs().max())", "x / 2.0")


def _pair(tmp_path, problem_source: str, candidate_forward: str):
    problem = tmp_path / "problem.py"
    problem.write_text(problem_source)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(PEAK_NORMALISED.replace("class Model(", "class ModelNew(").replace(
        "return x / float(x.abs().max())", candidate_forward))
    return problem, candidate


def test_a_host_transfer_the_problems_reference_makes_is_a_warning_not_a_violation(tmp_path):
    from pytest_cudaagent import evaluate
    from tests.helpers import cpu_config

    problem, candidate = _pair(tmp_path, PEAK_NORMALISED, "return x / float(x.abs().max())")
    for policy in ("permissive", "calibration"):
        result = evaluate(problem, candidate, cpu_config(policy=policy, trials=2, timing=False))
        assert result.passed, result.summary()
        noted = [w for w in result.warnings if w.rule == "host_transfer_as_reference"]
        assert len(noted) == 1 and "aten::_local_scalar_dense" in noted[0].detail
        assert not result.violations
    strict = evaluate(problem, candidate, cpu_config(policy="strict", trials=2, timing=False))
    assert not strict.passed and "host_compute" in {v.rule for v in strict.violations}


def test_a_host_transfer_the_reference_does_not_make_stays_host_compute(tmp_path):
    from pytest_cudaagent import evaluate
    from tests.helpers import cpu_config

    # Variants of a scalar read the reference (x / 2) never makes.
    for forward in ("return x / (2.0 * float(x.abs().max()) / float(x.abs().max()))",
                    "return x / (x.sum().item() * 0 + 2.0)"):
        problem, candidate = _pair(tmp_path, PLAIN_SCALE, forward)
        result = evaluate(problem, candidate, cpu_config(policy="permissive", trials=2, timing=False))
        assert not result.passed and result.violations[0].rule == "host_compute", result.summary()
        assert not [w for w in result.warnings if w.rule == "host_transfer_as_reference"]


def test_a_reference_that_fails_under_the_audit_is_run_as_before(tmp_path):
    """The audit of the reference's first call (worker.audited_reference) is ours: where the
    reference cannot run under it, the call is made again without it, and the problem is judged
    as before, not made a problem_error."""
    from pytest_cudaagent import evaluate
    from tests.helpers import cpu_config

    refuses_modes = PLAIN_SCALE.replace(
        "        return x / 2.0\n",
        "        from torch.utils._python_dispatch import _get_current_dispatch_mode\n"
        "        if _get_current_dispatch_mode() is not None:\n"
        "            raise RuntimeError('not under a dispatch mode')\n"
        "        return x / 2.0\n")
    problem, candidate = _pair(tmp_path, refuses_modes, "return x * 0.5")
    result = evaluate(problem, candidate, cpu_config(policy="permissive", trials=2, timing=False))
    assert result.passed, result.summary()
