from synthesis.contamination import ContaminationIndex, load_kernelbench_index
from synthesis.signature import problem_signature

from .test_filters import task

# Our own toy problem, written as a KernelBench clone would lay it out.
TOY_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.relu(x)
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(128, 64)]


def get_init_inputs():
    return [64, 32]
'''


def test_kernelbench_near_duplicates_are_found(tmp_path):
    level = tmp_path / "KernelBench" / "level2"
    level.mkdir(parents=True)
    (level / "1_Gemm_ReLU_Tanh.py").write_text(TOY_PROBLEM)
    index = load_kernelbench_index(tmp_path / "KernelBench")
    same = problem_signature(task("return torch.tanh(F.relu(torch.matmul(x, self.w)))"))
    assert index.contaminated_by(same) == "level2/1_Gemm_ReLU_Tanh.py"
    different = problem_signature(task("return torch.cumsum(x * self.w, dim=-1)"))
    assert index.contaminated_by(different) is None


def test_similarity_threshold_on_same_ranks():
    index = ContaminationIndex(similarity=0.8)
    index.add_reference("ref", task("return torch.exp(torch.tanh(torch.sigmoid(torch.relu(torch.abs(x)))))"))
    near = problem_signature(task("return torch.exp(torch.tanh(torch.sigmoid(torch.relu(torch.neg(x)))))"))
    assert index.contaminated_by(near) == "ref"  # four of five in order: 0.8
    strict = ContaminationIndex(similarity=0.95, references=index.references)
    assert strict.contaminated_by(near) is None


def test_duplicates_among_synthesized_tasks():
    index = ContaminationIndex()
    first = problem_signature(task("return torch.tanh(x) * self.w"))
    assert index.duplicate_of("a", first) is None
    assert index.duplicate_of("b", problem_signature(task("return torch.tanh(x) * self.w + 0"))) is None
    assert index.duplicate_of("c", first) == "a"
