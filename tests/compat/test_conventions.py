"""Whose "correct" a verdict follows: KernelBench's convention (both models as constructed, in
training mode, built after the same seed, weights copied by name and shape) against CUDA Agent's
(eval mode, Model's state_dict loaded strictly), on the CPU backend with pure-PyTorch candidates."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cudaagent import EvalConfig, ProblemError, Result, evaluate
from pytest_cudaagent.core.config import Tolerance
from tests.helpers import cpu_config

HERE = Path(__file__).parent
CONVENTIONS = HERE / "conventions"
COMPAT = HERE  # the compatibility suite's own pairs: problems/ and candidates/
BOTH = ("kernelbench", "cuda-agent")


def run(problem: str, candidate: str, convention: str, root: Path = CONVENTIONS) -> Result:
    config = cpu_config(convention=convention, policy="permissive")
    result = evaluate(root / "problems" / f"{problem}.py", root / "candidates" / f"{candidate}.py", config)
    assert result.convention == convention
    return result


def test_kernelbench_is_the_default_and_survives_the_round_trip():
    assert EvalConfig().convention == "kernelbench"
    assert EvalConfig.from_dict(EvalConfig(convention="cuda-agent").to_dict()).convention == "cuda-agent"


def test_kernelbench_main_tolerance_preset():
    tolerances = EvalConfig(tolerance="kernelbench-main").tolerances()
    assert tolerances["float32"] == Tolerance(1e-4, 1e-4)
    assert tolerances["float16"] == tolerances["bfloat16"] == Tolerance(1e-2, 1e-2)
    assert EvalConfig().tolerances()["float32"] == Tolerance(1e-2, 1e-2)


def test_batchnorm_folded_with_running_statistics_is_right_in_eval_mode_only():
    assert run("batchnorm", "batchnorm_sample_1", "kernelbench").status == "incorrect"
    assert run("batchnorm", "batchnorm_sample_1", "cuda-agent").status == "passed"


def test_batch_statistics_written_out_are_right_in_training_mode_only():
    assert run("batchnorm", "batchnorm_sample_2", "kernelbench").status == "passed"
    assert run("batchnorm", "batchnorm_sample_2", "cuda-agent").status == "incorrect"


@pytest.mark.parametrize("convention", BOTH)
def test_dropout_at_zero_passes_both(convention):
    assert run("dropout_off", "dropout_off", convention).status == "passed"


def test_active_dropout_matches_when_drawn_the_same_way_under_the_same_seed():
    result = run("dropout_active", "dropout_active", "kernelbench")
    assert result.status == "passed", result.summary()
    # Half the elements are dropped: a match means the masks were the same, not that none was drawn.
    assert all(trial.max_abs_error == 0.0 for trial in result.trials)


def test_parameters_drawn_in_another_order_are_copied_by_name_and_shape():
    """Wrong as KernelBench builds it (fc2 drawn first), right with the reference's entries
    copied in: the second build is the one judged, and the Result says the copy was needed."""
    result = run("two_layers", "two_layers", "kernelbench")
    assert result.status == "passed", result.summary()
    assert result.weights == {"copied": 4, "reference_entries": 4, "candidate_entries": 4, "differing": 4,
                              "copy_needed": True}
    assert json.loads(result.to_json())["weights"]["copy_needed"] is True


def test_weights_say_what_was_copied():
    # The folded candidate keeps only buffers of its own names: nothing matches, nothing is
    # copied, the same seed makes it right.
    folded = run("folded_scale", "folded_scale", "kernelbench", root=COMPAT)
    assert folded.passed and folded.weights == {"copied": 0, "reference_entries": 2, "candidate_entries": 2,
                                                "differing": 0, "copy_needed": False}
    # Its num_batches_tracked has another shape: never compared, never a size-mismatch error;
    # the rest is as the same seed drew it, so nothing is copied.
    batchnorm = run("num_batches_tracked", "num_batches_tracked", "kernelbench", root=COMPAT)
    assert batchnorm.passed and batchnorm.weights == {"copied": 0, "reference_entries": 7, "candidate_entries": 7,
                                                      "differing": 0, "copy_needed": False}
    assert json.loads(batchnorm.to_json())["weights"]["copied"] == 0


def test_cuda_agent_loads_the_state_dict_strictly_and_names_the_keys():
    result = run("renamed_parameters", "renamed_parameters", "cuda-agent", root=COMPAT)
    assert result.status == "runtime_error", result.summary()
    assert "linear.weight" in result.error and "linear.bias" in result.error
    assert run("renamed_parameters", "renamed_parameters", "kernelbench", root=COMPAT).passed


@pytest.mark.parametrize("convention", BOTH)
def test_instance_norm_passes_both(convention):
    assert run("instance_norm", "instance_norm", convention).status == "passed"


def test_a_model_that_puts_itself_in_eval_mode_stays_there_under_kernelbench():
    result = run("self_eval", "self_eval", "kernelbench")
    assert result.status == "passed", result.summary()


def test_batchnorm_over_a_batch_of_one_names_the_convention_and_the_way_out():
    with pytest.raises(ProblemError) as raised:
        run("batchnorm_batch_one", "batchnorm_batch_one", "kernelbench")
    assert "kernelbench" in str(raised.value) and "--convention cuda-agent" in str(raised.value)
    assert run("batchnorm_batch_one", "batchnorm_batch_one", "cuda-agent").passed


def test_a_reference_that_disagrees_with_itself_is_not_the_candidates_fault():
    """Its own generator, seeded from the OS: no seed reproduces it, not even replayed on a model
    built afresh (it looks stateful: a second call answers otherwise)."""
    result = run("noisy_reference", "noisy_reference", "kernelbench")
    assert result.status == "nondeterministic_reference" and not result.passed and result.reward == -1
    assert result.nondeterministic_trials == [0, 1, 2, 3, 4]


def cudaagent(*args):
    return subprocess.run([sys.executable, "-m", "pytest_cudaagent.cli", *args], capture_output=True, text=True,
                          timeout=600)


def test_verify_takes_the_convention_flag():
    problem, candidate = CONVENTIONS / "problems" / "batchnorm.py", CONVENTIONS / "candidates" / "batchnorm_sample_1.py"
    common = ("--device", "cpu", "--no-timing", "--policy", "permissive", "--json")
    folded = {convention: cudaagent("verify", str(problem), str(candidate), "--convention", convention, *common)
              for convention in BOTH}
    assert folded["kernelbench"].returncode == 1 and folded["cuda-agent"].returncode == 0
    assert json.loads(folded["cuda-agent"].stdout)["convention"] == "cuda-agent"
    batch_one = cudaagent("verify", str(CONVENTIONS / "problems" / "batchnorm_batch_one.py"),
                          str(CONVENTIONS / "candidates" / "batchnorm_batch_one.py"), *common)
    assert batch_one.returncode == 2 and "cuda-agent" in batch_one.stderr
