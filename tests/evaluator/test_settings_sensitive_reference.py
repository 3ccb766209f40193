"""A failed trial where the reference itself answers otherwise under the run's backend settings
(those the candidate runs under) than at full fp32: the trial cannot judge a candidate whose
answer is the reference's under those settings, as when the reference does not repeat itself
under the same seed (`nondeterministic_reference`); one far from both is still incorrect.
Found on the H100: KernelBench's EfficientNetB2 with the problem's own model as the candidate."""

from pathlib import Path

from pytest_cudaagent import evaluate
from tests.helpers import cpu_config

DATA = Path(__file__).resolve().parents[1] / "data" / "problems"
SENSITIVE = DATA / "settings_sensitive.py"
SMALL_LEAKY = DATA / "small_leaky_relu.py"

CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()

    def forward(self, x):
        return {body}
'''
HONEST = "x * 2 + (1.0 if torch.backends.cudnn.allow_tf32 else 0.0)"  # the problem's own code
WRONG = "x * 3"


def candidate(tmp_path: Path, body: str) -> Path:
    path = tmp_path / f"candidate_{abs(hash(body))}.py"
    path.write_text(CANDIDATE.format(body=body))
    return path


def test_a_reference_that_moves_with_the_run_settings_cannot_judge_its_own_answer_under_them(tmp_path):
    result = evaluate(SENSITIVE, candidate(tmp_path, HONEST), cpu_config(policy="permissive", timing=False))
    assert result.status == "nondeterministic_reference" and not result.passed and result.reward == -1
    assert result.nondeterministic_trials == [0, 1, 2, 3, 4]  # every trial failed, none can judge
    assert "under the run's backend settings" in result.error and "cudnn.allow_tf32" in result.error
    assert "--backend strict-fp32" in result.error


def test_a_candidate_far_from_the_reference_under_either_settings_is_incorrect(tmp_path):
    result = evaluate(SENSITIVE, candidate(tmp_path, WRONG), cpu_config(policy="permissive", timing=False))
    assert result.status == "incorrect" and result.nondeterministic_trials == []
    assert "under the run's backend settings" not in result.error


def test_at_full_fp32_the_same_trials_judge_again(tmp_path):
    config = cpu_config(policy="permissive", timing=False, backend="strict-fp32")
    assert evaluate(SENSITIVE, candidate(tmp_path, HONEST), config).status == "passed"
    wrong = evaluate(SENSITIVE, candidate(tmp_path, WRONG), config)
    assert wrong.status == "incorrect" and wrong.nondeterministic_trials == []


def test_a_wrong_candidate_of_a_steady_reference_stays_incorrect(tmp_path):
    """The reference recomputed under the run's settings agrees with itself: no excuse."""
    result = evaluate(SMALL_LEAKY, candidate(tmp_path, "x * 0.5"), cpu_config(policy="permissive", timing=False))
    assert result.status == "incorrect" and result.nondeterministic_trials == []
