"""Facts about a candidate's outputs, read in its own process right after `forward`: exact type,
device, aliasing of inputs. The values travel to the parent as CPU copies for comparison."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .compare import as_output_list, describe, same_values
from .result import Violation

# What an output that is not a tensor may be, to travel to the evaluator: anything else would be
# unpickled there (replies.py refuses it) and compared by its own __eq__.
PLAIN_VALUES = (type(None), bool, int, float, complex, str)


def _storage_pointer(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def inspect_outputs(outputs: object, inputs: list, device: str,
                    copy_with: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict:
    """Checks on the outputs as returned, and a copy of each tensor: on the host, or by
    `copy_with` (on the device itself where a timed loop must not stall on a copy to the host,
    timer.OutputCopies; the worker brings them over after the loop)."""
    values = as_output_list(outputs)
    violations, copies = [], []
    input_storages = {_storage_pointer(t) for t in inputs if isinstance(t, torch.Tensor)}
    for position, value in enumerate(values):
        if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
            # A subclass may compute lazily when compared or fake its values: never convert it.
            violations.append(Violation("output_type", f"output {position} is {type(value).__qualname__}, not torch.Tensor"))
            copies.append(None)
            continue
        if type(value) is torch.Tensor:
            if value.device.type != device:
                violations.append(Violation("output_type", f"output {position} is on {value.device}, expected {device}"))
            if value.numel() and _storage_pointer(value) in input_storages:
                violations.append(Violation("output_alias", f"output {position} shares memory with an input"))
            copies.append(copy_with(value) if copy_with is not None else value.detach().to("cpu", copy=True))
        elif type(value) in PLAIN_VALUES:
            copies.append(value)
        else:
            violations.append(Violation("output_type", f"output {position} is {type(value).__qualname__}, "
                                        "not a torch.Tensor or a number"))
            copies.append(None)
    return {"outputs": copies, "output_types": [describe(v) for v in values], "violations": violations}


def storage_changes(held_outputs: object, copies: list) -> list[Violation]:
    """`held_outputs`, returned by an earlier call and held since, against the copies taken right
    after that call: a change means a later call wrote into storage already handed out (a
    persistent output buffer, a CUDA graph's static output)."""
    changed = []
    for position, (value, copy) in enumerate(zip(as_output_list(held_outputs), copies, strict=False)):
        if type(value) is torch.Tensor and isinstance(copy, torch.Tensor) and value.numel():
            if not same_values(copy, value.detach().to("cpu")):
                changed.append(Violation(
                    "output_reused", f"forward returned output {position} in storage that a later call overwrote; "
                    "a caller holding an earlier result sees it change"))
    return changed
