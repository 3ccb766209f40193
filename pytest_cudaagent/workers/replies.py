"""Unpickling what a process running a candidate's code sends back, with only the classes a reply
may hold.

A reply is a pickle, and unpickling runs whatever callable the pickle names: a candidate that
writes its own message on the pipe (`__reduce__` returning `(os.system, ("...",))`) would run code
in the evaluating process, outside the sandbox, where results files are written. The candidate's
replies hold dicts, lists, numbers, strings, `Violation`s and CPU tensors in shared memory
(torch.multiprocessing's reductions); every other global a pickle names is refused, and the reply
with it (`ForbiddenReply`).
"""

from __future__ import annotations

import io
import pickle

import torch

# (module, name) a candidate's reply may name. torch's dtypes are added below, by value.
ALLOWED_GLOBALS = frozenset({
    ("builtins", "complex"),
    ("builtins", "frozenset"),
    ("builtins", "set"),
    ("collections", "OrderedDict"),
    # A CPU tensor in shared memory: its storage's descriptor comes through the sender's resource
    # sharer; the storage is only memory, and set_ checks the tensor's extent against it.
    ("multiprocessing.resource_sharer", "DupFd"),
    ("torch.multiprocessing.reductions", "rebuild_storage_empty"),
    ("torch.multiprocessing.reductions", "rebuild_storage_fd"),
    ("torch.multiprocessing.reductions", "rebuild_tensor"),
    ("torch.multiprocessing.reductions", "rebuild_typed_storage"),
    ("torch.storage", "UntypedStorage"),
    ("torch", "Size"),
    ("torch", "Tensor"),
    ("torch", "device"),
    ("pytest_cudaagent.core.result", "Violation"),
})


class ForbiddenReply(Exception):
    """A reply named a global no reply of ours holds: the candidate wrote its own message."""


def _is_dtype(module: str, name: str) -> bool:
    return module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)


class _ReplyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS or _is_dtype(module, name):
            return super().find_class(module, name)
        raise ForbiddenReply(f"the candidate's process sent a message naming {module}.{name}, which no reply of the "
                             "evaluator's holds (a forged message: unpickled, it would run code in the evaluator)")


def load_reply(data: bytes) -> object:
    """`data` (one message's bytes) unpickled with only ALLOWED_GLOBALS; ForbiddenReply otherwise,
    and for a message that is not a pickle at all. OSError when the sender ended before the
    descriptors of its tensors' shared memory could be fetched (a crash, not a forgery)."""
    try:
        return _ReplyUnpickler(io.BytesIO(data)).load()
    except (ForbiddenReply, OSError):  # OSError: the sender died before its descriptors were fetched
        raise
    except Exception as error:  # truncated, garbage, or a reduction given wrong arguments
        raise ForbiddenReply(f"the candidate's process sent a message that is not a reply: "
                             f"{type(error).__name__}: {str(error)[:300]}") from None
