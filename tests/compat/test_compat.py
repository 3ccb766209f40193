"""Honest solutions written in the styles that published KernelBench solutions use (written here,
not taken from any published set): each passes under the permissive policy, and under strict
where it runs only its own kernels. The cases and their styles are listed in README.md."""

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.records.pairing import pair_directory
from tests.helpers import QUICK_TIMING, cpu_config

HERE = Path(__file__).parent
PROBLEMS = HERE / "problems"
CANDIDATES = HERE / "candidates"
PERMISSIVE = ("permissive",)
BOTH = ("permissive", "strict")


@dataclass(frozen=True)
class Case:
    style: str
    policies: tuple[str, ...]  # the policies it must pass
    device: str  # "cpu": runs on the CPU backend; "cuda": GPU-only code


CASES = {
    "folded_scale": Case("scale folded into the weights in `__init__`; only the folded buffers kept", PERMISSIVE, "cpu"),
    "pretransposed_weight": Case("pre-transposed weight buffer next to the layer, `addmm`", PERMISSIVE, "cpu"),
    "summed_weights": Case("two branches' weights summed once in `__init__`", PERMISSIVE, "cpu"),
    "renamed_parameters": Case("`self.weight` instead of `self.linear.weight`, initialised like nn.Linear", PERMISSIVE, "cpu"),
    "randn_parameters": Case("`nn.Parameter(torch.randn(...))` in the reference's order, other names", PERMISSIVE, "cpu"),
    "reshaped_bias": Case("bias of shape (C,) where the reference's is (C, 1, 1)", PERMISSIVE, "cpu"),
    "num_batches_tracked": Case("BatchNorm written out; `num_batches_tracked` of another shape", PERMISSIVE, "cpu"),
    "out_buffer_tanh": Case("persistent `out=` buffer returned by every call", PERMISSIVE, "cpu"),
    "channels_last_conv": Case("channels_last weights and input", PERMISSIVE, "cpu"),
    "manual_softmax": Case("pure-PyTorch rewrite (max-shifted exp / sum)", PERMISSIVE, "cpu"),
    "sequential_mlp": Case("nn.Sequential rewritten as named layers (other parameter names)", PERMISSIVE, "cpu"),
    "einsum_bmm": Case("pure-PyTorch rewrite (`einsum` for `bmm`)", PERMISSIVE, "cpu"),
    "layernorm_manual": Case("LayerNorm written out, affine parameters renamed", PERMISSIVE, "cpu"),
    "conv_scale_folded": Case("multiplier and offset folded into the conv's weight and bias", PERMISSIVE, "cpu"),
    "unfold_maxpool": Case("pure-PyTorch rewrite (`unfold` + `amax`)", PERMISSIVE, "cpu"),
    "embedding_lookup": Case("embedding table renamed, `index_select` on integer inputs", PERMISSIVE, "cpu"),
    "reduction_mean": Case("pure-PyTorch rewrite (sum / length)", PERMISSIVE, "cpu"),
    "cpp_glue_linear_hardtanh": Case("PyTorch glue (`F.linear`) around one C++ `load_inline` kernel", PERMISSIVE, "cpu"),
    "cpp_leaky_residual": Case("one C++ `load_inline` kernel does everything", BOTH, "cpu"),
    "cpp_pretransposed_gemm": Case("C++ GEMM over a weight transposed in `__init__`", BOTH, "cpu"),
    # Issue #39: a constant folded into a parameter or buffer that keeps its name (the reference's
    # entries are never copied over what the candidate's __init__ computed), ...
    "fold_div_inplace": Case("divisor folded into the conv's own weight and bias in place, names kept", PERMISSIVE, "cpu"),
    "fold_bias_sub": Case("`conv.bias.sub_(value)` in `__init__`, bare (built under `no_grad`)", PERMISSIVE, "cpu"),
    "fold_data_mul": Case("`weight.data *= 1 + s`: scale and residual folded into the Gemm's parameters", PERMISSIVE, "cpu"),
    "fold_batchnorm_eval": Case("BatchNorm folded into the conv's own weight and bias (eval-mode model)", PERMISSIVE, "cpu"),
    "buffer_scale_folded": Case("constant folded in place into a buffer of the reference's name and shape", PERMISSIVE, "cpu"),
    "square_weight_transposed": Case("square weight transposed in place under its own name", PERMISSIVE, "cpu"),
    "two_linears_folded": Case("two linear layers folded into the first one's own parameters", PERMISSIVE, "cpu"),
    # ... a reference that keeps state, a scalar read of the model's own state, and the sweep of
    # what published solutions do in __init__ and forward.
    "rnn_hidden_buffer": Case("stateful: hidden state in a buffer, updated in place every call", PERMISSIVE, "cpu"),
    "item_first_call_setup": Case("scripted epilogue built on the first call from `.item()` of its own parameter", PERMISSIVE, "cpu"),
    "forward_hooks": Case("forward pre-hook and forward hook registered in `__init__`", PERMISSIVE, "cpu"),
    "backend_flags": Case("`torch.backends` flags switched at import and in `__init__`", PERMISSIVE, "cpu"),
    "returns_view": Case("returns a transposed (non-contiguous) view of its result", PERMISSIVE, "cpu"),
    "contiguous_params": Case("`.contiguous()` on parameters every call", PERMISSIVE, "cpu"),
    "lazy_first_call_cache": Case("fused weight built on the first call and cached", PERMISSIVE, "cpu"),
    "running_stats_updated": Case("training-mode BatchNorm written out, running statistics updated in place", PERMISSIVE, "cpu"),
    "persistent_scratch": Case("scratch buffer kept across calls (`out=`), a fresh output returned", PERMISSIVE, "cpu"),
    "gpu_cuda_graph_cached": Case("one CUDA graph per input shape, captured on first call, output cloned", PERMISSIVE, "cuda"),
    "gpu_inline_folded": Case("divisor folded through `.data`, one CUDA `load_inline` kernel", PERMISSIVE, "cuda"),
    "gpu_cuda_graph": Case("CUDA graph with a static input and a static output", PERMISSIVE, "cuda"),
    "gpu_streams": Case("two CUDA streams, one per branch", PERMISSIVE, "cuda"),
    "gpu_inline_swish": Case("one CUDA `load_inline` kernel", BOTH, "cuda"),
}
# Cases whose forward returns the same storage every call: the reuse is reported, not failed.
OUTPUT_REUSED = {"out_buffer_tanh", "gpu_cuda_graph"}


def runs(device: str) -> list:
    """(case, policy) parameters for one device; C++ builds are marked slow, GPU cases gpu."""
    params = []
    for name, case in sorted(CASES.items()):
        if case.device != device:
            continue
        marks = [pytest.mark.gpu] if device == "cuda" else [pytest.mark.slow] if name.startswith("cpp_") else []
        params += [pytest.param(name, policy, marks=marks, id=f"{name}-{policy}") for policy in case.policies]
    return params


def check_passed(name: str, policy: str, config: EvalConfig) -> None:
    result = evaluate(PROBLEMS / f"{name}.py", CANDIDATES / f"{name}.py", config)
    assert result.status == "passed", f"{name} ({policy}): {result.summary()}\n{result.log[-1500:]}"
    if name in OUTPUT_REUSED:
        assert "output_reused" in {warning.rule for warning in result.warnings}, result.warnings


def test_every_pair_is_a_listed_case():
    paired = {pair.problem.stem for pair in pair_directory(PROBLEMS, CANDIDATES)}
    assert paired == set(CASES) == {path.stem for path in CANDIDATES.glob("*.py")}
    assert sum(case.device == "cpu" for case in CASES.values()) >= 20


def test_readme_lists_every_case_with_its_policies():
    rows = {}
    for line in (HERE / "README.md").read_text().splitlines():
        match = re.match(r"\| `(\w+)` \|.*\| ([a-z, ]+) \| (cpu|cuda) \|$", line)
        if match:
            rows[match.group(1)] = (tuple(match.group(2).split(", ")), match.group(3))
    assert rows == {name: (case.policies, case.device) for name, case in CASES.items()}


@pytest.mark.parametrize(("name", "policy"), runs("cpu"))
def test_cpu_case_passes(name, policy):
    check_passed(name, policy, cpu_config(policy=policy, timing=True, timing_config=QUICK_TIMING))


@pytest.mark.parametrize(("name", "policy"), runs("cuda"))
def test_gpu_case_passes(name, policy):
    check_passed(name, policy, EvalConfig(device="cuda", policy=policy, baselines=(), timing_config=QUICK_TIMING))
