"""Run-time checks inside the candidate's process, around every `forward` call.

- a TorchDispatchMode sees every operator, Python's and the extension's own `torch::`/`at::`
  calls alike, and records those the policy forbids (`fallback_op`) or that move data to the
  host (`host_compute`);
- each finding names the line of the candidate's code that made the call;
- on the CPU backend a profile hook sees NumPy computing inside `forward` (`host_compute`);
- threads still running after `forward` returns are `background_thread`;
- where the policy allows scalar reads of the model's own state, the audit follows which
  storages hold only that state (`ModelConstants`), so `float(self.scale)` in a setup path is
  told apart from `.item()` on anything computed from the inputs.
Findings are recorded, not raised, so the candidate runs to the end and the parent decides.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..core.result import Violation
from .rules import HALF_DTYPES, SCALAR_READ_OPS, Policy

_HOST_LIBRARIES = ("numpy", "scipy", "numba", "cupy", "jax")
_TENSOR_EXPORTS = ("numpy", "tolist", "__array__")
# Frames of these modules are not the candidate's: their calls into NumPy are not its doing.
_INTERNAL_MODULES = ("numpy", "scipy", "torch", "importlib", "_frozen_importlib", "triton", "pytest_cudaagent", "typing", "inspect", "functools", "contextlib")


class Findings:
    """Violations seen so far, one per (rule, detail)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], Violation] = {}
        self.precision: set[str] = set()
        # What the watch saw, so the cost of watching can be bounded (timing_inconsistent, CPU).
        self.operators_seen = 0
        self.python_calls_seen = 0

    def add(self, rule: str, detail: str) -> None:
        self._seen.setdefault((rule, detail), Violation(rule, detail))

    def drain(self) -> list[Violation]:
        found = list(self._seen.values())
        self._seen.clear()
        return found


def _op_names(func) -> tuple[str, str]:
    namespace = getattr(func, "namespace", None) or func.name().split("::")[0]
    return namespace, func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else func.name()


def _calling_frame():
    """The innermost frame outside torch and this harness: whoever issued the operator."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("torch", "pytest_cudaagent")):
        frame = frame.f_back
    return frame


def _issued_by_triton_interpreter(frame) -> bool:
    """Triton's CPU interpreter moves a kernel's results back with torch ops (set_, copy_):
    the mechanics of running the candidate's Triton kernel, not a fallback."""
    return frame is not None and frame.f_globals.get("__name__", "").startswith("triton.runtime.interpreter")


def _call_site(frame) -> str:
    """Looked up only when a finding is recorded, so the common path costs nothing."""
    if frame is None:
        return ""
    return f" (at {frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} in {frame.f_code.co_name})"


def without_call_site(detail: str) -> str:
    """A finding's text without the call site _call_site appended: what the operator did, the
    same wherever in the code it was called (the reference's and the candidate's files differ)."""
    return detail.split(" (at ")[0]


def _tensors(value, depth: int = 0):
    """The tensors in an operator's arguments or results, or in a module attribute: a tensor, or
    one inside a list, tuple or dict (two levels deep at most)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 2 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth + 1)


def _storage(tensor: torch.Tensor) -> int | None:
    try:
        return tensor.untyped_storage().data_ptr() or None
    except (RuntimeError, NotImplementedError):  # sparse, nested: no plain storage
        return None


class ModelConstants:
    """The storages that hold only the model's own state during one forward call: its
    parameters, buffers and tensor attributes when the call began, and the results of PyTorch
    operators whose tensor arguments all hold such state. An operator given anything else (an
    input, a fresh allocation, what an extension returned) makes its results, and any tensor it
    writes, hold something else. Conservative by design: a storage it does not know holds no
    constant (an extension's writes are invisible here, so nothing it touches is trusted)."""

    def __init__(self, model) -> None:
        self.storages: set[int] = set()
        modules = model.modules() if isinstance(model, torch.nn.Module) else []
        for module in modules:
            for tensor in _tensors(list(vars(module).values())):
                storage = _storage(tensor)
                if storage is not None:
                    self.storages.add(storage)

    def holds(self, tensor: torch.Tensor) -> bool:
        return _storage(tensor) in self.storages

    def follow(self, func, args, kwargs, results, own_operator: bool = False) -> None:
        """After an operator ran: its results and the tensors it wrote hold the model's state
        only if it is PyTorch's and every tensor it was given does."""
        arguments = list(_tensors(list(args))) + list(_tensors(list(kwargs.values())))
        constant = not own_operator and bool(arguments) and all(self.holds(tensor) for tensor in arguments)
        touched = [*_tensors(results if isinstance(results, (list, tuple)) else [results]),
                   *_written_arguments(func, args, kwargs)]
        for tensor in touched:
            storage = _storage(tensor)
            if storage is None:
                continue
            if constant:
                self.storages.add(storage)
            else:
                self.storages.discard(storage)


def _written_arguments(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an operator's schema says it writes (all of them where it has no schema)."""
    try:
        schema_arguments = func._schema.arguments
    except AttributeError:
        return [*_tensors(list(args)), *_tensors(list(kwargs.values()))]
    written = []
    for position, argument in enumerate(schema_arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[position] if position < len(args) else kwargs.get(argument.name)
        written += _tensors([value])
    return written


class _OperatorAudit(TorchDispatchMode):
    def __init__(self, policy: Policy, findings: Findings, device: str, constants: ModelConstants | None = None):
        super().__init__()
        self.policy = policy
        self.findings = findings
        self.device = device
        self.constants = constants

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.findings.operators_seen += 1
        namespace, name = _op_names(func)
        if namespace in ("aten", "prims"):
            if name in ("_to_copy", "copy_", "to") and self._moves_to_host(func, args, kwargs):
                self.findings.add("host_compute", f"{namespace}::{name} copies device data to the host{_call_site(_calling_frame())}")
            elif not self.policy.allows_op(namespace, name) and not self._reads_model_constant(name, args):
                frame = _calling_frame()
                if not _issued_by_triton_interpreter(frame):
                    rule = "host_compute" if name in SCALAR_READ_OPS else "fallback_op"
                    self.findings.add(rule, f"{namespace}::{name}{_call_site(frame)}")
            self._note_precision(name, args, kwargs)
            results = func(*args, **kwargs)
            if self.constants is not None:
                self.constants.follow(func, args, kwargs, results)
            return results
        # An operator of the candidate's own (torch.library / TORCH_LIBRARY): audit what runs
        # inside it too; the mode is popped while we are here, so push a fresh one. What it
        # returns or writes is not followed: it holds no constant of the model's any more.
        with _OperatorAudit(self.policy, self.findings, self.device, self.constants):
            results = func(*args, **kwargs)
        if self.constants is not None:
            self.constants.follow(func, args, kwargs, results, own_operator=True)
        return results

    def _reads_model_constant(self, name: str, args) -> bool:
        """A scalar read of the model's own state, where the policy allows it."""
        return (self.constants is not None and self.policy.allow_model_scalar_reads and name in SCALAR_READ_OPS
                and bool(args) and isinstance(args[0], torch.Tensor) and self.constants.holds(args[0]))

    def _moves_to_host(self, func, args, kwargs) -> bool:
        if self.device == "cpu":
            return False
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        target = kwargs.get("device")
        if target is not None:
            return torch.device(target).type == "cpu" and any(t.device.type != "cpu" for t in tensors)
        if func.overloadpacket.__name__ == "copy_" and len(tensors) >= 2:
            return tensors[0].device.type == "cpu" and tensors[1].device.type != "cpu"
        return False

    def _note_precision(self, name: str, args, kwargs) -> None:
        dtype = kwargs.get("dtype")
        if dtype is not None and any(half in str(dtype) for half in HALF_DTYPES):
            self.findings.precision.add(f"{str(dtype).removeprefix('torch.')} tensors ({name})")


class _HostLibraryWatch:
    """sys.setprofile hook that sees the candidate's own code calling NumPy and friends (CPU
    backend). Calls made by torch or by the libraries themselves are their business."""

    def __init__(self, findings: Findings):
        self.findings = findings

    @staticmethod
    def _library_of(module: str) -> str | None:
        return next((lib for lib in _HOST_LIBRARIES if module == lib or module.startswith(lib + ".")), None)

    @staticmethod
    def _is_candidate_frame(frame) -> bool:
        module = frame.f_globals.get("__name__", "") if frame is not None else ""
        return not module.startswith(_INTERNAL_MODULES)

    def __call__(self, frame, event, arg):
        if event in ("call", "c_call"):
            self.findings.python_calls_seen += 1
        if event == "c_call":
            name = getattr(arg, "__name__", "")
            if name in _TENSOR_EXPORTS and isinstance(getattr(arg, "__self__", None), torch.Tensor):
                # NumPy ufuncs are not C functions to the profiler; the tensor handed to NumPy is.
                if self._is_candidate_frame(frame):
                    self.findings.add("host_compute", f"Tensor.{name}() hands the data to the host in forward")
                return
            module = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__ or ""
            library = self._library_of(module)
            if library and self._is_candidate_frame(frame):
                self.findings.add("host_compute", f"{library}.{name or arg} called in forward")
        elif event == "call":
            module = frame.f_globals.get("__name__", "")
            if module == "torch._tensor" and frame.f_code.co_name == "__array__":
                if self._is_candidate_frame(frame.f_back) or self._library_of(frame.f_back.f_globals.get("__name__", "")):
                    self.findings.add("host_compute", "a tensor converted to a NumPy array in forward")
                return
            library = self._library_of(module)
            if library and self._is_candidate_frame(frame.f_back):
                self.findings.add("host_compute", f"{library}.{frame.f_code.co_name} called in forward")


class ForwardGuard:
    """Wraps each forward call: `guard(lambda: model(*inputs))`. Operator dispatch is audited on
    every call; `watch_host` adds the NumPy profile hook (CPU backend), which costs a Python-level
    hook per call and so is kept to the correctness and profiled calls."""

    def __init__(self, policy: Policy, device: str, watch_host: bool | None = None,
                 findings: Findings | None = None, model_of: Callable[[], object] | None = None):
        self.policy = policy
        self.device = device
        self.watch_host = device == "cpu" if watch_host is None else watch_host
        self.findings = findings or Findings()
        # The model being called, whose own state a scalar may be read from where the policy
        # allows it (ModelConstants); looked up at each call (the candidate may be rebuilt).
        self.model_of = model_of
        # Captured now, before the candidate is imported, so patching them changes nothing.
        self._enumerate_threads = threading.enumerate
        self._setprofile = sys.setprofile
        self._getprofile = sys.getprofile

    def light(self) -> ForwardGuard:
        """The same audit without the host-library hook, for the many timed calls."""
        return ForwardGuard(self.policy, self.device, watch_host=False, findings=self.findings, model_of=self.model_of)

    def __call__(self, call: Callable[[], object]) -> object:
        threads_before = set(self._enumerate_threads())
        previous_profile = self._getprofile() if self.watch_host else None
        constants = (ModelConstants(self.model_of()) if self.policy.allow_model_scalar_reads and self.model_of
                     else None)
        with _OperatorAudit(self.policy, self.findings, self.device, constants):
            if self.watch_host:
                self._setprofile(_HostLibraryWatch(self.findings))
            try:
                output = call()
            finally:
                if self.watch_host:
                    self._setprofile(previous_profile)
        for thread in set(self._enumerate_threads()) - threads_before:
            if thread.is_alive():
                self.findings.add("background_thread", f"thread {thread.name!r} still running after forward")
        return output
