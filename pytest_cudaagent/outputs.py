"""Facts about a candidate's outputs, read in its own process right after `forward`: exact type,
device, aliasing of inputs. The values travel to the parent as host copies in shared memory for
comparison; copies kept here to tell later whether a call changed an input or an output it had
handed out stay on the device while they fit a budget."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .compare import as_output_list, describe, same_values
from .result import Violation
from .shared_tensors import shared_copy

# Bytes of device copies kept per evaluation: of the inputs around one correctness call
# (device_snapshot), of the outputs held until check_held (held_copies). Beyond them, host copies.
SNAPSHOT_BUDGET_BYTES = 1 << 30
HELD_ON_DEVICE_BUDGET_BYTES = 1 << 30

# What an output that is not a tensor may be, to travel to the evaluator: anything else would be
# unpickled there (replies.py refuses it) and compared by its own __eq__.
PLAIN_VALUES = (type(None), bool, int, float, complex, str)


def _storage_pointer(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def inspect_outputs(outputs: object, inputs: list, device: str,
                    copy_with: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    into: list | None = None) -> dict:
    """Checks on the outputs as returned, and a copy of each tensor: on the host in shared memory
    (into the evaluator's storage `into[position]` when it has the output's size), or by
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
            lent = into[position] if into is not None and position < len(into) else None
            if copy_with is not None:
                copies.append(copy_with(value))
            elif type(lent) is torch.UntypedStorage and lent.nbytes() == value.nbytes:
                copies.append(torch.empty(0, dtype=value.dtype).set_(lent, 0, value.shape).copy_(value.detach()))
            else:
                copies.append(shared_copy(value))
        elif type(value) in PLAIN_VALUES:
            copies.append(value)
        else:
            violations.append(Violation("output_type", f"output {position} is {type(value).__qualname__}, "
                                        "not a torch.Tensor or a number"))
            copies.append(None)
    return {"outputs": copies, "output_types": [describe(v) for v in values], "violations": violations}


def device_snapshot(inputs: list) -> list:
    """Copies of the tensors among `inputs`, where they are, with their metadata (None for the
    rest, and for every one beyond SNAPSHOT_BUDGET_BYTES or the device's memory: `unchanged`
    then says changed, and the input travels as before)."""
    tensors = [value for value in inputs if type(value) is torch.Tensor]
    if sum(value.nbytes for value in tensors) > SNAPSHOT_BUDGET_BYTES:
        return [None] * len(inputs)
    try:
        return [(value.detach().clone(), value.shape, value.stride(), value.dtype, value.storage_offset())
                if type(value) is torch.Tensor else None for value in inputs]
    except torch.OutOfMemoryError:
        return [None] * len(inputs)


def unchanged(snapshot: tuple | None, value: object) -> bool:
    """Whether the tensor `value` still has the metadata and bytes `snapshot` took of it (False
    without a snapshot, and for anything but a tensor: it travels back and the evaluator compares)."""
    if snapshot is None or type(value) is not torch.Tensor:
        return False
    copy, shape, stride, dtype, offset = snapshot
    if (value.shape, value.stride(), value.dtype, value.storage_offset()) != (shape, stride, dtype, offset):
        return False
    return same_values(copy, value.detach())


def held_copies(outputs: object, state: dict) -> list:
    """What check_held compares a held output with: a copy on its device while the evaluation's
    device copies fit HELD_ON_DEVICE_BUDGET_BYTES (`state["held_on_device_bytes"]`), else a
    private host copy (never the one sent: that buffer is the evaluator's, lent again)."""
    kept = []
    for value in as_output_list(outputs):
        if type(value) is not torch.Tensor:
            kept.append(None)
            continue
        used = state.get("held_on_device_bytes", 0)
        if value.device.type != "cpu" and used + value.nbytes <= HELD_ON_DEVICE_BUDGET_BYTES:
            try:
                kept.append(value.detach().clone())
                state["held_on_device_bytes"] = used + value.nbytes
                continue
            except torch.OutOfMemoryError:
                pass
        kept.append(value.detach().to("cpu", copy=True))
    return kept


def storage_changes(held_outputs: object, copies: list) -> list[Violation]:
    """`held_outputs`, returned by an earlier call and held since, against the copies taken right
    after that call (on its device or the host): a change means a later call wrote into storage
    already handed out (a persistent output buffer, a CUDA graph's static output)."""
    changed = []
    for position, (value, copy) in enumerate(zip(as_output_list(held_outputs), copies, strict=False)):
        if type(value) is torch.Tensor and isinstance(copy, torch.Tensor) and value.numel():
            if not same_values(copy, value.detach().to(copy.device)):
                changed.append(Violation(
                    "output_reused", f"forward returned output {position} in storage that a later call overwrote; "
                    "a caller holding an earlier result sees it change"))
    return changed
