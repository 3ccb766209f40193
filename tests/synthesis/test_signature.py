from pathlib import Path

from synthesis.signature import is_stochastic, normalise, problem_signature, stochastic_calls

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "problems"


def test_spellings_of_one_operator_normalise_together():
    assert normalise("nn.GELU") == normalise("torch.nn.functional.gelu") == "gelu"
    assert normalise("nn.Linear") == normalise("torch.matmul") == "gemm"
    assert normalise("hf.LlamaRMSNorm") == "rmsnorm"
    assert normalise("nn.LazyConv2d") == "conv2d"


def test_signature_of_a_problem_file_in_forward_order():
    signature = problem_signature((EXAMPLES / "linear_bias_relu.py").read_text())
    assert signature.operators == ["gemm", "relu"]
    assert signature.input_ranks == [2]
    chain = problem_signature((EXAMPLES / "scale_tanh_mean.py").read_text())
    assert chain.operators == ["mul", "add", "tanh", "mean"]


def test_stochastic_operators_are_named():
    assert is_stochastic("nn.Dropout2d") and is_stochastic("torch.randn_like")
    assert is_stochastic("F.rrelu") and not is_stochastic("F.normalize")
    source = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4))
        self.drop = nn.Dropout(0.1)
    def forward(self, x):
        return self.drop(x) + torch.rand_like(x) * self.w
def get_inputs(): return [torch.randn(2, 4)]
def get_init_inputs(): return []
'''
    assert stochastic_calls(source) == ["nn.Dropout", "torch.rand_like"]
