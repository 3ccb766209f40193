"""Facts about a candidate's outputs, read in its own process right after `forward`: exact type,
device, aliasing of inputs. The values travel to the parent as host copies in shared memory for
comparison; copies kept here to tell later whether a call changed an input or an output it had
handed out stay on the device while they fit a budget; beyond it a held output is remembered by a
digest of its bytes, computed where it lives (`content_digest`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..core import tensor_trees as trees
from ..core.compare import as_output_list, describe, same_values
from ..core.result import Violation
from ..core.shared_tensors import shared_copy, shared_empty
from . import output_memory

# Bytes of device copies kept per evaluation: of the inputs around one correctness call
# (device_snapshot), of the outputs held until check_held (held_copies). Beyond them, host copies.
SNAPSHOT_BUDGET_BYTES = 1 << 30
HELD_ON_DEVICE_BUDGET_BYTES = 1 << 30
# The held outputs themselves (HeldOutputs): while they fit this share of the memory they live in
# (the device's whole memory, not what is free, so the window is the same alone and in a batch).
HELD_MEMORY_SHARE = 0.25
# ... and never fewer than the latest calls', whatever their size: storage a call reuses is that
# of an output handed out just before.
HELD_AT_LEAST = 2

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
    input_storages = {_storage_pointer(t) for t in trees.tensors(inputs)}
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
            kind = output_memory.device_memory_kind(value)
            if kind is not None:
                violations.append(Violation(output_memory.RULE, f"output {position} is in {kind}, not the device's own "
                                            "memory: a host thread can write it after forward returned"))
            lent = into[position] if into is not None and position < len(into) else None
            try:
                if copy_with is not None:
                    copies.append(copy_with(value))
                elif type(lent) is torch.UntypedStorage and lent.nbytes() == value.nbytes:
                    copies.append(output_memory.copy_into(torch.empty(0, dtype=value.dtype).set_(lent, 0, value.shape),
                                                          value))
                else:
                    copies.append(_host_copy(value))
            except output_memory.UnreadableOutput as unreadable:
                violations.append(Violation(output_memory.RULE, f"output {position} is memory this process cannot "
                                            f"read ({unreadable}): its values would be computed when first read, after "
                                            "the clock stopped"))
                copies.append(None)
        elif type(value) in PLAIN_VALUES:
            copies.append(value)
        else:
            violations.append(Violation("output_type", f"output {position} is {type(value).__qualname__}, "
                                        "not a torch.Tensor or a number"))
            copies.append(None)
    return {"outputs": copies, "output_types": [describe(v) for v in values], "violations": violations}


def _host_copy(value: torch.Tensor) -> torch.Tensor:
    """A copy in shared memory; a CPU output's read through the kernel (output_memory.py)."""
    if value.device.type != "cpu":
        return shared_copy(value)
    return output_memory.copy_into(shared_empty(value.shape, value.dtype), value)


def device_snapshot(inputs: list) -> list:
    """Copies of each input's tensors (a tensor, or the tensors nested in a list, tuple or dict:
    tensor_trees.py), where they are, with their metadata and the input itself (None for an input
    without tensors or with any other kind of tensor, and for every one beyond
    SNAPSHOT_BUDGET_BYTES or the device's memory: `unchanged` then says changed, and the input
    travels as before)."""
    snapshots: list = [None] * len(inputs)
    if sum(value.nbytes for value in trees.tensors(inputs) if type(value) is torch.Tensor) > SNAPSHOT_BUDGET_BYTES:
        return snapshots
    try:
        for position, value in enumerate(inputs):
            held = trees.tensors(value)
            if held and all(type(tensor) is torch.Tensor for tensor in held):
                # The containers copied too: forward may append to a list it was given.
                structure = trees.map_tensors(lambda tensor: tensor, value)
                snapshots[position] = (structure, [_tensor_snapshot(tensor) for tensor in held])
    except torch.OutOfMemoryError:
        return [None] * len(inputs)
    return snapshots


def _tensor_snapshot(tensor: torch.Tensor) -> tuple:
    return tensor.detach().clone(), tensor.shape, tensor.stride(), tensor.dtype, tensor.storage_offset()


def unchanged(snapshot: tuple | None, value: object) -> bool:
    """Whether the input `value` still holds the tensors, with the metadata and bytes, that
    `snapshot` took of it, in the same containers (False without a snapshot: it travels back and
    the evaluator compares)."""
    if snapshot is None:
        return False
    was, copies = snapshot
    now = trees.tensors(value)
    if not trees.same_structure(was, value) or len(now) != len(copies):
        return False
    for tensor, (copy, shape, stride, dtype, offset) in zip(now, copies, strict=True):
        if type(tensor) is not torch.Tensor:
            return False
        if (tensor.shape, tensor.stride(), tensor.dtype, tensor.storage_offset()) != (shape, stride, dtype, offset):
            return False
        if not same_values(copy, tensor.detach()):
            return False
    return True


def held_copies(outputs: object, state: dict) -> list:
    """What check_held compares a held output with: a copy on its device while the evaluation's
    copies fit HELD_ON_DEVICE_BUDGET_BYTES (`state["held_on_device_bytes"]`; on the CPU the copy is
    host memory, in the same budget), else a digest of its bytes (`content_digest`, computed on its
    device): at KernelBench's full sizes the host copies were nine of 4-6 GiB per pair, 20-39 s of
    copying and the anonymous memory the kernel's OOM killer took. A private host copy only where
    no digest can be taken (never the one sent: that buffer is the evaluator's, lent again)."""
    kept = []
    for value in as_output_list(outputs):
        # Not a dense tensor (a sparse one): nothing to compare storage with; the output's own
        # check says it is not the reference's kind of tensor.
        if type(value) is not torch.Tensor or value.layout != torch.strided:
            kept.append(None)
            continue
        used = state.get("held_on_device_bytes", 0)
        nbytes = value.numel() * value.element_size()  # (Tensor.nbytes raises for a sparse layout)
        if used + nbytes <= HELD_ON_DEVICE_BUDGET_BYTES:
            try:
                kept.append(value.detach().clone())
                state["held_on_device_bytes"] = used + nbytes
                continue
            except torch.OutOfMemoryError:
                pass
        try:
            kept.append(HeldDigest.of(value))
            continue
        except (torch.OutOfMemoryError, RuntimeError, TypeError, NotImplementedError):
            pass  # no byte view of it (a sparse or quantized layout), or no memory for the sums
        kept.append(value.detach().to("cpu", copy=True))
    return kept


# Rows of a held output digested at a time (dim 0), so a non-contiguous output's contiguous
# copies stay small; elements per chunk at most DIGEST_CHUNK_ELEMENTS.
DIGEST_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class HeldDigest:
    """A held output's metadata and a digest of its bytes: the wrapping int64 sum of its words
    and their sum weighted by position (a changed word, or two words swapped, changes it). The
    candidate cannot choose what a later call writes into storage it handed out (the new inputs
    decide the values), so a collision is chance, not design."""

    shape: tuple
    stride: tuple
    offset: int
    dtype: torch.dtype
    digest: tuple[int, int]

    @classmethod
    def of(cls, tensor: torch.Tensor) -> HeldDigest:
        return cls(tuple(tensor.shape), tensor.stride(), tensor.storage_offset(), tensor.dtype,
                   content_digest(tensor))

    def matches(self, tensor: torch.Tensor) -> bool:
        return (tuple(tensor.shape), tensor.stride(), tensor.storage_offset(), tensor.dtype) == \
            (self.shape, self.stride, self.offset, self.dtype) and content_digest(tensor) == self.digest


def content_digest(tensor: torch.Tensor) -> tuple[int, int]:
    """(sum of words, position-weighted sum of words), wrapping int64, over the tensor's bytes in
    row-major order, computed on its device in chunks of rows."""
    with torch.no_grad():
        value = tensor.detach()
        if value.dim() == 0:
            value = value.reshape(1)
        rows = value.shape[0] if value.numel() else 0
        row_elements = max(1, value.numel() // max(rows, 1))
        step = max(1, DIGEST_CHUNK_ELEMENTS // row_elements)
        total = weighted = torch.zeros((), dtype=torch.int64, device=value.device)
        position = 0
        for start in range(0, rows, step):
            flat = value[start:start + step].contiguous().reshape(-1)
            raw = flat.view(torch.uint8)
            try:  # four bytes a word where the chunk's length and alignment allow
                words = raw.view(torch.int32)
            except RuntimeError:
                words = raw
            wide = words.to(torch.int64)
            index = torch.arange(position, position + wide.numel(), dtype=torch.int64, device=wide.device)
            index.mul_(0x9E3779B1).add_(0x7F4A7C15).bitwise_and_(0x7FFFFFFF)
            total = total + wide.sum()
            weighted = weighted + (wide * index).sum()
            position += wide.numel()
        return int(total), int(weighted)


def held_window_bytes(total_memory_bytes: int) -> int:
    """The bytes of held outputs a candidate's worker keeps before it checks and lets go of the
    oldest (HeldOutputs): a share of the memory of the device they live on."""
    return int(total_memory_bytes * HELD_MEMORY_SHARE)


def output_bytes(outputs: object) -> int:
    """The bytes of an output's dense tensors (what holding it keeps from the allocator)."""
    return sum(value.numel() * value.element_size() for value in as_output_list(outputs)
               if type(value) is torch.Tensor and value.layout == torch.strided)


class HeldOutputs:
    """The correctness calls' outputs, each held (so the allocator cannot hand its memory out
    again) beside copies taken right after its call, until they are compared with those copies:
    a change means a later call wrote into storage already handed out. At KernelBench's full
    sizes nine held outputs are 72 GiB (level1/39_L2Norm_, 8 GiB each): with the call's own input
    and output more than an H100 has (#38). So once the held outputs pass `window_bytes`, the
    oldest are compared and let go, the latest HELD_AT_LEAST always kept: an output let go has
    met every call made after it until then, and a buffer reused call after call (a persistent
    output, a CUDA graph's static output) is caught by the first output let go. Only a candidate
    cycling through more buffers than the window holds escapes, and only where the outputs are
    that large."""

    def __init__(self, window_bytes: int):
        self.window_bytes = window_bytes
        self.held: list[tuple[object, list, int]] = []  # (outputs, their copies, their bytes)
        self.changes: list[Violation] = []  # found in outputs already let go
        self.let_go = 0  # outputs compared and let go before the end
        # Bound now, in the worker's constructor, before the candidate's code loads: a candidate
        # that rebinds the module's function does not reach this one.
        self._storage_changes = storage_changes

    def hold(self, outputs: object, copies: list) -> None:
        self.held.append((outputs, copies, output_bytes(outputs)))
        while len(self.held) > HELD_AT_LEAST and sum(entry[2] for entry in self.held) > self.window_bytes:
            outputs_let_go, copies_let_go, _ = self.held.pop(0)
            self.changes.extend(self._storage_changes(outputs_let_go, copies_let_go))
            self.let_go += 1

    def check(self) -> list[Violation]:
        """Every change found, those still held compared now; then nothing is held."""
        found = self.changes + [change for outputs, copies, _ in self.held
                                for change in self._storage_changes(outputs, copies)]
        self.clear()
        return found

    def clear(self) -> None:
        self.held.clear()
        self.changes = []


def storage_changes(held_outputs: object, copies: list) -> list[Violation]:
    """`held_outputs`, returned by an earlier call and held since, against the copies taken right
    after that call (on its device or the host): a change means a later call wrote into storage
    already handed out (a persistent output buffer, a CUDA graph's static output)."""
    changed = []
    for position, (value, copy) in enumerate(zip(as_output_list(held_outputs), copies, strict=False)):
        if type(value) is not torch.Tensor:
            continue
        if isinstance(copy, HeldDigest):
            overwritten = not copy.matches(value)
        else:
            overwritten = (isinstance(copy, torch.Tensor) and bool(value.numel())
                           and not same_values(copy, value.detach().to(copy.device)))
        if overwritten:
            changed.append(Violation(
                "output_reused", f"forward returned output {position} in storage that a later call overwrote; "
                "a caller holding an earlier result sees it change"))
    return changed
