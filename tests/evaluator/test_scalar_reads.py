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
