"""Keeps persisting-L2 lines from surviving the timer's flush, and reports who set them.

A candidate can set the persisting-L2 carve-out and an access-policy window with
hitProp=Persisting over its inputs: the timer's flush is a write, and writes do not evict
persisting lines, so the inputs stay in L2 across timed calls (HACKS.md, B). Before each timed
call the guard zeroes the carve-out, clears the timing stream's window and demotes every
persisting line; after the call it reads the carve-out and the window back, and a candidate that
left either set gets an `l2_persistence` violation.

The calls go to the CUDA driver (libcuda.so.1) through ctypes: the one library every CUDA
process loads under one name, whatever runtime wheel torch ships; the runtime's
cudaDeviceSetLimit/cudaStreamSetAttribute act on the same context state. Every call runs in the
context that was current when the guard was made (torch's primary context), pushed around the
call, so a candidate that leaves another context current changes nothing here.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..core.result import Violation

RULE = "l2_persistence"

# cuda.h (CUDA 13), equal to the runtime's cudaLimitPersistingL2CacheSize,
# cudaStreamAttributeAccessPolicyWindow and cudaAccessProperty*; test_l2_persistence.py checks
# them against the headers.
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
ACCESS_PROPERTY_NORMAL = 0
ACCESS_PROPERTY_STREAMING = 1
ACCESS_PROPERTY_PERSISTING = 2
CUDA_SUCCESS = 0
# cuCtxGetLimit's answer where there is no carve-out to set (before Ampere; MIG disables it).
NO_CARVE_OUT_ERRORS = (215, 801)  # CUDA_ERROR_UNSUPPORTED_LIMIT, CUDA_ERROR_NOT_SUPPORTED


class AccessPolicyWindow(ctypes.Structure):
    """CUaccessPolicyWindow / cudaAccessPolicyWindow."""

    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),  # an enum: int-sized
        ("missProp", ctypes.c_int),
    ]


class StreamAttrValue(ctypes.Union):
    """CUstreamAttrValue / cudaStreamAttrValue (= the launch-attribute union, 64 bytes)."""

    _fields_ = [("pad", ctypes.c_char * 64), ("accessPolicyWindow", AccessPolicyWindow)]


@dataclass(frozen=True)
class Window:
    """An access-policy window as read back from a stream."""

    base_ptr: int
    num_bytes: int
    hit_ratio: float
    hit_prop: int
    miss_prop: int

    def persists(self) -> bool:
        return self.num_bytes > 0 and self.hit_ratio > 0 and self.hit_prop == ACCESS_PROPERTY_PERSISTING


# What the CUDA guide writes to turn a stream's window off.
CLEARED_WINDOW = Window(0, 0, 0.0, ACCESS_PROPERTY_NORMAL, ACCESS_PROPERTY_STREAMING)


class CudaError(RuntimeError):
    def __init__(self, function: str, code: int):
        super().__init__(f"{function} returned CUDA error {code}; the persisting-L2 reset cannot run "
                         "(look the code up in cuda.h's cudaError_enum)")
        self.code = code


class L2Controls(Protocol):
    """The driver calls the guard needs; `DriverL2` makes them, tests pass a fake."""

    def persisting_limit(self) -> int: ...
    def set_persisting_limit(self, nbytes: int) -> None: ...
    def window(self, stream: int) -> Window: ...
    def set_window(self, stream: int, window: Window) -> None: ...
    def reset_persisting_lines(self) -> None: ...


class DriverL2:
    """The driver's persisting-L2 calls, each inside the context current at construction."""

    def __init__(self, library: str = "libcuda.so.1"):
        lib = ctypes.CDLL(library)
        self._calls = {name: getattr(lib, name) for name in (
            "cuCtxGetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuCtxGetLimit",
            "cuCtxSetLimit", "cuStreamGetAttribute", "cuStreamSetAttribute", "cuCtxResetPersistingL2Cache")}
        self._calls["cuCtxSetLimit"].argtypes = [ctypes.c_int, ctypes.c_size_t]
        self._calls["cuCtxGetLimit"].argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        for name in ("cuStreamGetAttribute", "cuStreamSetAttribute"):
            self._calls[name].argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(StreamAttrValue)]
        self._context = ctypes.c_void_p()
        self._check("cuCtxGetCurrent", self._calls["cuCtxGetCurrent"](ctypes.byref(self._context)))
        if not self._context.value:
            raise RuntimeError("no CUDA context is current: initialise CUDA in this thread (torch.cuda.init()) "
                               "before making the persisting-L2 guard")

    @staticmethod
    def _check(function: str, code: int) -> None:
        if code != CUDA_SUCCESS:
            raise CudaError(function, code)

    def _in_context(self, function: str, *args) -> int:
        self._check("cuCtxPushCurrent", self._calls["cuCtxPushCurrent_v2"](self._context))
        try:
            return self._calls[function](*args)
        finally:
            popped = ctypes.c_void_p()
            self._check("cuCtxPopCurrent", self._calls["cuCtxPopCurrent_v2"](ctypes.byref(popped)))

    def persisting_limit(self) -> int:
        value = ctypes.c_size_t()
        self._check("cuCtxGetLimit", self._in_context(
            "cuCtxGetLimit", ctypes.byref(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE))
        return value.value

    def set_persisting_limit(self, nbytes: int) -> None:
        self._check("cuCtxSetLimit", self._in_context("cuCtxSetLimit", CU_LIMIT_PERSISTING_L2_CACHE_SIZE, nbytes))

    def window(self, stream: int) -> Window:
        value = StreamAttrValue()
        self._check("cuStreamGetAttribute", self._in_context(
            "cuStreamGetAttribute", stream, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, ctypes.byref(value)))
        raw = value.accessPolicyWindow
        return Window(raw.base_ptr or 0, raw.num_bytes, raw.hitRatio, raw.hitProp, raw.missProp)

    def set_window(self, stream: int, window: Window) -> None:
        value = StreamAttrValue()
        value.accessPolicyWindow = AccessPolicyWindow(
            window.base_ptr, window.num_bytes, window.hit_ratio, window.hit_prop, window.miss_prop)
        self._check("cuStreamSetAttribute", self._in_context(
            "cuStreamSetAttribute", stream, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, ctypes.byref(value)))

    def reset_persisting_lines(self) -> None:
        self._check("cuCtxResetPersistingL2Cache", self._in_context("cuCtxResetPersistingL2Cache"))


class PersistenceGuard:
    """`reset()` before a timed call's L2 flush, `check(label)` after the call; `drain()` hands
    out the violations seen since the last drain."""

    def __init__(self, controls: L2Controls, stream: int, synchronize: Callable[[], None], windows: bool = True):
        self.controls = controls
        self.stream = stream
        self._synchronize = synchronize
        # False where the timing stream takes no window (the driver refused to read one): the
        # candidate cannot set one there either, and the carve-out is still reset and read.
        self.windows = windows
        self._seen: dict[str, Violation] = {}

    def reset(self) -> None:
        # Work still queued (the input refill, perhaps inside the candidate's window) finishes
        # first, so no persisting line is made after the demotion below.
        self._synchronize()
        self.controls.set_persisting_limit(0)
        if self.windows:
            self.controls.set_window(self.stream, CLEARED_WINDOW)
        # Zeroing the carve-out does not say what happens to lines already persisting: demote
        # them all, so the flush that follows evicts them like any other line.
        self.controls.reset_persisting_lines()

    def check(self, label: str) -> None:
        limit = self.controls.persisting_limit()
        if limit > 0:
            self._add(f"the persisting-L2 carve-out was {limit} bytes after a {label} call "
                      "(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize) or cuCtxSetLimit): persisting lines "
                      "survive the timer's L2 flush; set it back to 0 and call cudaCtxResetPersistingL2Cache "
                      "before forward returns")
        window = self.controls.window(self.stream) if self.windows else CLEARED_WINDOW
        if window.persists():
            self._add(f"an access-policy window with hitProp=Persisting ({window.num_bytes} bytes, hitRatio "
                      f"{window.hit_ratio:.2f}) was left on the timing stream after a {label} call; set its "
                      "num_bytes to 0 before forward returns")

    def _add(self, detail: str) -> None:
        self._seen.setdefault(detail, Violation(RULE, detail))

    def drain(self) -> list[Violation]:
        found = list(self._seen.values())
        self._seen.clear()
        return found


class NoPersistenceGuard:
    """On the CPU, and on GPUs without a persisting carve-out: nothing to reset or read."""

    def reset(self) -> None:
        pass

    def check(self, label: str) -> None:
        pass

    def drain(self) -> list[Violation]:
        return []


def guard_for(controls: L2Controls, stream: int, synchronize: Callable[[], None]) -> PersistenceGuard | NoPersistenceGuard:
    """A guard over `controls`, or none where the device has no carve-out to set."""
    try:
        controls.persisting_limit()
    except CudaError as error:
        if error.code in NO_CARVE_OUT_ERRORS:
            return NoPersistenceGuard()
        raise
    try:
        controls.window(stream)
    except CudaError:
        return PersistenceGuard(controls, stream, synchronize, windows=False)
    return PersistenceGuard(controls, stream, synchronize)


def persistence_guard(device: str, stream: int, synchronize: Callable[[], None]) -> PersistenceGuard | NoPersistenceGuard:
    """The guard for the timer on `device` whose timing stream is the handle `stream`; call it
    after CUDA is initialised, in the thread that times, before the candidate is imported."""
    if device != "cuda":
        return NoPersistenceGuard()
    return guard_for(DriverL2(), stream, synchronize)
