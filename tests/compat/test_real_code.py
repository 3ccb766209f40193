"""What published KernelBench solutions do that our default convention (kernelbench) once judged
otherwise than KernelBench (issue #39), on the CPU backend:

- a constant folded into a parameter or buffer that keeps its name: the candidate is judged as
  KernelBench builds it; the reference's entries are copied in only for a build that is wrong
  without them and right with them (parameters drawn in another order), never over a fold;
- a reference that keeps state across calls: every call of the candidate is compared with the
  reference's call at the same position (the extra unwatched call included), a failed trial is
  checked by replaying the reference on a model built afresh, and the Result names it stateful;
- a solution that picks its precision by timing itself: judged on the answer it gave;
- `torch.jit.script` inside try/except: the candidate's source is exec'd as KernelBench's eval
  does, so scripting its functions fails and the except branch runs;
- `.item()` of the model's own state in a setup path: not `host_compute` under permissive.
"""

import re
from pathlib import Path

import pytest

from pytest_cudaagent import EvalConfig, Result, evaluate
from tests.helpers import QUICK_TIMING, TEST_PROBLEMS, cpu_config

HERE = Path(__file__).parent
CONVENTIONS = HERE / "conventions"
ADVERSARIAL = HERE.parent / "adversarial" / "candidates"

FOLDED = ["fold_div_inplace", "fold_bias_sub", "fold_data_mul", "fold_batchnorm_eval", "buffer_scale_folded",
          "square_weight_transposed", "two_linears_folded"]


def run(problem: Path, candidate: Path, **overrides) -> Result:
    settings = dict(policy="permissive")
    settings.update(overrides)
    return evaluate(problem, candidate, cpu_config(**settings))


def compat(name: str, **overrides) -> Result:
    return run(HERE / "problems" / f"{name}.py", HERE / "candidates" / f"{name}.py", **overrides)


def convention_case(problem: str, candidate: str, **overrides) -> Result:
    return run(CONVENTIONS / "problems" / f"{problem}.py", CONVENTIONS / "candidates" / f"{candidate}.py", **overrides)


# -- a constant folded into a parameter that keeps its name ------------------------------------


@pytest.mark.parametrize("name", FOLDED)
def test_a_constant_folded_into_an_entry_that_keeps_its_name_is_never_copied_over(name):
    result = compat(name)
    assert result.status == "passed", result.summary()
    # Its entries of the reference's names and shapes hold what its __init__ computed, unlike the
    # reference's; it was right as built, so none was copied.
    assert result.weights["differing"] > 0 and result.weights["copied"] == 0
    assert result.weights["copy_needed"] is False


BUILD_PROBE = '''"""Prints which build of it answers each call."""

import itertools

import torch
import torch.nn as nn

BUILDS = itertools.count(1)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.linear.weight.data.mul_(3.0)
        self.build = next(BUILDS)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        print(f"build {{self.build}} call {{self.calls}}", flush=True)
        return torch.relu(self.linear(x) * {factor})
'''


def builds_called(log: str) -> list[tuple[int, int]]:
    return [(int(build), int(call)) for build, call in re.findall(r"build (\d) call (\d+)", log)]


def test_a_build_right_only_with_the_reference_weights_is_kept_and_the_result_says_so(tmp_path):
    """Its __init__ triples a weight its forward uses as drawn: wrong as built, right with the
    reference's entries copied in (the lenience: it fills what the construction left unlike)."""
    candidate = tmp_path / "copy_helps.py"
    candidate.write_text(BUILD_PROBE.format(factor=0.5))
    result = run(HERE / "problems" / "folded_scale.py", candidate)
    assert result.status == "passed", result.summary()
    assert result.weights == {"copied": 2, "reference_entries": 2, "candidate_entries": 2, "differing": 1,
                              "copy_needed": True}
    # The second build answered the first trial again and every call after it (9 calls in all).
    assert builds_called(result.log) == [(1, 1)] + [(2, call) for call in range(1, 10)]


def test_a_build_wrong_both_ways_is_judged_as_kernelbench_builds_it(tmp_path):
    candidate = tmp_path / "wrong_both_ways.py"
    candidate.write_text(BUILD_PROBE.format(factor=0.25))
    result = run(HERE / "problems" / "folded_scale.py", candidate)
    assert result.status == "incorrect" and result.trials[0].error
    assert result.weights["copied"] == 0 and result.weights["copy_needed"] is False
    # Back to the first build, which goes on where it was (its second call is trial 1's).
    assert builds_called(result.log) == [(1, 1), (2, 1)] + [(1, call) for call in range(2, 10)]


# -- a reference that keeps state across calls -------------------------------------------------


def test_an_exact_copy_of_a_stateful_reference_passes_and_the_result_names_it():
    result = convention_case("stateful_rnn", "stateful_rnn_sample_1")
    assert result.status == "passed", result.summary()
    assert result.stateful_reference is True
    assert "stateful_reference" in {warning.rule for warning in result.warnings}
    assert Result.from_json(result.to_json()).stateful_reference is True


@pytest.mark.parametrize(("problem", "candidate"), [("call_counter", "call_counter_sample_1"),
                                                    ("stateful_rnn", "stateful_rnn_sample_1")])
def test_a_stateful_reference_with_timing_compares_no_timed_outputs(problem, candidate):
    """The timed calls' answers depend on how many calls came before (the warm-up's count is
    the candidate's own): compared, an exact copy of a call counter reads as `timed_output`. (An
    RNN's state washes out within a few calls, so its timed outputs would mostly match anyway.)"""
    result = convention_case(problem, candidate, timing=True, timing_config=QUICK_TIMING)
    assert result.status == "passed", result.summary()
    assert result.timing["candidate"].samples > 0


def test_a_stateless_reference_is_not_named_stateful():
    result = compat("lazy_first_call_cache")  # a candidate with state of its own; the reference has none
    assert result.passed and result.stateful_reference is False
    assert "stateful_reference" not in {warning.rule for warning in result.warnings}


def test_a_candidate_that_forgets_the_state_is_incorrect_not_the_references_fault():
    """A failed trial of a stateful reference is checked by replaying the reference's calls on a
    model built afresh: it repeats itself, so the candidate is wrong (KernelBench: incorrect)."""
    result = convention_case("stateful_rnn", "stateful_rnn_sample_2")
    assert result.status == "incorrect", result.summary()
    assert result.nondeterministic_trials == [] and result.stateful_reference


def test_a_call_counter_is_judged_call_by_call():
    assert convention_case("call_counter", "call_counter_sample_1").status == "passed"
    wrong = convention_case("call_counter", "call_counter")  # x * 1 where the reference counts
    assert wrong.status == "incorrect" and wrong.nondeterministic_trials == [] and wrong.stateful_reference


UNWATCHED_STALE_RNN = '''"""Honest only when watched, on a stateful problem: unwatched, it returns its last answer."""

import torch
import torch.nn as nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

batch_size = 8


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden = torch.randn((batch_size, hidden_size))
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.last = None

    def forward(self, x):
        if _get_current_dispatch_mode() is None and self.last is not None:
            return self.last
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden.to(x.device)), dim=1)))
        self.last = self.h2o(self.hidden)
        return self.last
'''


def test_the_unwatched_call_still_judges_a_stateful_problem(tmp_path):
    """The reference is called twice on each set there too, so the unwatched call is kept: a
    candidate honest only when watched fails it (HACKS.md B)."""
    candidate = tmp_path / "unwatched_stale_rnn.py"
    candidate.write_text(UNWATCHED_STALE_RNN)
    result = run(CONVENTIONS / "problems" / "stateful_rnn.py", candidate)
    assert result.status == "incorrect", result.summary()
    assert "called without the operator audit" in result.error


# -- a solution that picks its precision by timing itself ---------------------------------------


def test_a_self_tuned_precision_is_judged_on_the_answer_it_chose():
    """Its choice depends on the load when it timed itself; whichever it made, the verdict is
    the one its answer earns: fp32 passes, half precision is the wrong dtype (KernelBench's own
    check errors on it: "Float did not match Half")."""
    result = convention_case("tuned_precision", "tuned_precision_sample_1")
    chose = re.search(r"tuned precision: (autocast|fp32)", result.log)
    assert chose, result.log
    if chose.group(1) == "fp32":
        assert result.status == "passed", result.summary()
    else:
        assert result.status == "incorrect" and "dtype torch.bfloat16, expected torch.float32" in result.error


def test_a_half_precision_answer_to_an_fp32_problem_is_incorrect():
    result = convention_case("tuned_precision", "tuned_precision_sample_2")
    assert result.status == "incorrect" and "dtype torch.bfloat16, expected torch.float32" in result.error


# -- torch.jit.script inside try/except ---------------------------------------------------------


def test_kernelbench_execs_the_source_so_scripting_its_functions_fails_as_there():
    """KernelBench exec's the candidate's source: no file behind its functions, so
    torch.jit.script of one fails. Inside try/except the fallback runs (whatever the scripted
    function would have done: sample 1's unannotated slope would be taken for a Tensor);
    unguarded, the load fails (KernelBench: a compilation error)."""
    assert convention_case("jit_fallback", "jit_fallback_sample_1").status == "passed"
    assert convention_case("jit_fallback", "jit_fallback_sample_2").status == "passed"
    unguarded = convention_case("jit_script_swish", "jit_script_swish")
    assert unguarded.status == "build_error", unguarded.summary()
    assert "source" in unguarded.error


def test_cuda_agent_imports_the_file_so_scripting_succeeds():
    """The paper's workspace imports the file: the scripted function runs, and a float given to
    an unannotated (so Tensor) parameter fails at the call."""
    scripted = convention_case("jit_fallback", "jit_fallback_sample_1", convention="cuda-agent")
    assert scripted.status == "runtime_error" and "Unable to cast 0.1 to Tensor" in scripted.error
    assert convention_case("jit_fallback", "jit_fallback_sample_2", convention="cuda-agent").status == "passed"
    assert convention_case("jit_script_swish", "jit_script_swish", convention="cuda-agent").status == "passed"


# -- .item() of the model's own state -----------------------------------------------------------


def test_a_scalar_read_of_the_models_own_parameter_is_host_compute_only_under_strict():
    assert compat("item_first_call_setup").status == "passed"
    strict = compat("item_first_call_setup", policy="strict")
    assert strict.status == "violation" and "host_compute" in {violation.rule for violation in strict.violations}
    assert "_local_scalar_dense" in strict.error


def test_a_host_loop_over_input_values_is_host_compute_under_permissive_too():
    result = run(TEST_PROBLEMS / "small_leaky_relu.py", ADVERSARIAL / "host_item_loop.py")
    assert result.status == "violation" and "host_compute" in {violation.rule for violation in result.violations}


# -- the classes on the GPU, timed --------------------------------------------------------------

GPU_CASES = [  # (directory, problem, candidate, status)
    (HERE, "fold_div_inplace", "fold_div_inplace", "passed"),
    (HERE, "fold_data_mul", "fold_data_mul", "passed"),
    (HERE, "item_first_call_setup", "item_first_call_setup", "passed"),
    (HERE, "rnn_hidden_buffer", "rnn_hidden_buffer", "passed"),
    (CONVENTIONS, "stateful_rnn", "stateful_rnn_sample_1", "passed"),
    (CONVENTIONS, "stateful_rnn", "stateful_rnn_sample_2", "incorrect"),
    (CONVENTIONS, "two_layers", "two_layers", "passed"),
    (CONVENTIONS, "jit_fallback", "jit_fallback_sample_1", "passed"),
    (CONVENTIONS, "tuned_precision", "tuned_precision_sample_2", "incorrect"),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("directory", "problem", "candidate", "status"), GPU_CASES,
                         ids=[case[2] for case in GPU_CASES])
def test_each_class_on_the_gpu(directory, problem, candidate, status):
    config = EvalConfig(device="cuda", policy="permissive", baselines=(), timing_config=QUICK_TIMING)
    result = evaluate(directory / "problems" / f"{problem}.py", directory / "candidates" / f"{candidate}.py", config)
    assert result.status == status, f"{result.summary()}\n{result.log[-1500:]}"
    assert result.stateful_reference is (problem in ("stateful_rnn", "rnn_hidden_buffer"))
