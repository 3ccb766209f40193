"""replies.py: a candidate's reply is unpickled with only the classes a reply holds."""

import os
import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch

from pytest_cudaagent.core.result import Violation
from pytest_cudaagent.workers.replies import ForbiddenReply, load_reply


def _as_sent(message) -> bytes:
    """The bytes a worker's Connection.send writes (torch's reductions registered)."""
    import torch.multiprocessing  # noqa: F401  (registers the tensor reductions)

    return bytes(ForkingPickler.dumps(message))


def test_every_kind_of_value_a_reply_holds_comes_back():
    tensors = [torch.randn(3, 4), torch.arange(6).view(2, 3).t(), torch.zeros(0), torch.ones(2, dtype=torch.bfloat16),
               torch.tensor(2.5, dtype=torch.float64), torch.randn(2, dtype=torch.complex64)]
    message = {"kind": "forward", "outputs": tensors, "violations": [Violation("output_type", "detail")],
               "numbers": [1, 2.5, 3j, True, None, "text"], "set": {1, 2}, "frozen": frozenset({3}),
               "shape": torch.Size([2, 3]), "dtype": torch.float16, "device": torch.device("cpu")}
    reply = load_reply(_as_sent(message))
    for sent, got in zip(tensors, reply["outputs"], strict=True):
        assert type(got) is torch.Tensor and got.dtype == sent.dtype and torch.equal(got, sent)
    assert reply["violations"] == [Violation("output_type", "detail")]
    assert reply["numbers"] == [1, 2.5, 3j, True, None, "text"] and reply["set"] == {1, 2}
    assert reply["shape"] == torch.Size([2, 3]) and reply["dtype"] is torch.float16


class _Calls:
    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


@pytest.mark.parametrize("forged", [
    _Calls(exec, "import os"),
    _Calls(os.system, "true"),
    _Calls(eval, "1"),
    _Calls(getattr, "text", "upper"),
    _Calls(torch.load, "/dev/null"),  # a torch global that is not a dtype
    _Calls(torch.nn.Parameter, torch.ones(1)),  # a tensor subclass
], ids=["exec", "os.system", "eval", "getattr", "torch.load", "Parameter"])
def test_a_pickle_naming_any_other_global_is_refused_before_it_runs(forged):
    with pytest.raises(ForbiddenReply, match="naming"):
        load_reply(pickle.dumps({"kind": "forward", "outputs": [forged]}))


def test_bytes_that_are_no_pickle_are_refused():
    with pytest.raises(ForbiddenReply, match="not a reply"):
        load_reply(b"\x80\x05PASSED")
