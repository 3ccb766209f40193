"""Run-time checks inside the candidate's process, around every `forward` call.

- a TorchDispatchMode sees every operator, Python's and the extension's own `torch::`/`at::`
  calls alike, and records those the policy forbids (`fallback_op`) or that move data to the
  host (`host_compute`);
- each finding names the line of the candidate's code that made the call;
- on the CPU backend a profile hook sees NumPy computing inside `forward` (`host_compute`);
- threads still running after `forward` returns are `background_thread`.
Findings are recorded, not raised, so the candidate runs to the end and the parent decides.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .result import Violation
from .rules import HALF_DTYPES, Policy

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


class _OperatorAudit(TorchDispatchMode):
    def __init__(self, policy: Policy, findings: Findings, device: str):
        super().__init__()
        self.policy = policy
        self.findings = findings
        self.device = device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.findings.operators_seen += 1
        namespace, name = _op_names(func)
        if namespace in ("aten", "prims"):
            if name in ("_to_copy", "copy_", "to") and self._moves_to_host(func, args, kwargs):
                self.findings.add("host_compute", f"{namespace}::{name} copies device data to the host{_call_site(_calling_frame())}")
            elif not self.policy.allows_op(namespace, name):
                frame = _calling_frame()
                if not _issued_by_triton_interpreter(frame):
                    rule = "host_compute" if name in ("_local_scalar_dense", "item") else "fallback_op"
                    self.findings.add(rule, f"{namespace}::{name}{_call_site(frame)}")
            self._note_precision(name, args, kwargs)
            return func(*args, **kwargs)
        # An operator of the candidate's own (torch.library / TORCH_LIBRARY): audit what runs
        # inside it too; the mode is popped while we are here, so push a fresh one.
        with _OperatorAudit(self.policy, self.findings, self.device):
            return func(*args, **kwargs)

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
                 findings: Findings | None = None):
        self.policy = policy
        self.device = device
        self.watch_host = device == "cpu" if watch_host is None else watch_host
        self.findings = findings or Findings()
        # Captured now, before the candidate is imported, so patching them changes nothing.
        self._enumerate_threads = threading.enumerate
        self._setprofile = sys.setprofile
        self._getprofile = sys.getprofile

    def light(self) -> ForwardGuard:
        """The same audit without the host-library hook, for the many timed calls."""
        return ForwardGuard(self.policy, self.device, watch_host=False, findings=self.findings)

    def __call__(self, call: Callable[[], object]) -> object:
        threads_before = set(self._enumerate_threads())
        previous_profile = self._getprofile() if self.watch_host else None
        with _OperatorAudit(self.policy, self.findings, self.device):
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
