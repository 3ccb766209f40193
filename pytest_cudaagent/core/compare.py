"""Element-wise comparison of a candidate's outputs with the reference's, in the parent process."""

from __future__ import annotations

import ctypes
import math

import torch

from .config import DEFAULT_TOLERANCES, Tolerance
from .result import TrialResult


def as_output_list(outputs: object) -> list[object]:
    if isinstance(outputs, (tuple, list)):
        return list(outputs)
    return [outputs]


def describe(value: object) -> str:
    if type(value) is torch.Tensor:
        return f"Tensor{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return type(value).__name__


def _libc_memcmp():
    try:
        memcmp = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError):  # no C library to ask (not Linux or macOS): the element-wise way only
        return None
    memcmp.restype = ctypes.c_int
    memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return memcmp


_MEMCMP = _libc_memcmp()


def bitwise_equal(first: torch.Tensor, second: torch.Tensor) -> bool:
    """The same bytes: one memcmp, serial and without temporaries (a 64 MiB tensor in 3 ms where
    the chunked element-wise way takes 40). False whenever it cannot tell (not both contiguous
    host tensors of one dtype and shape, a lazy conjugate or negation): the caller then goes the
    element-wise way. The same bytes are the same values, NaN meeting the same NaN included."""
    if (_MEMCMP is None or first.device.type != "cpu" or second.device.type != "cpu" or first.dtype != second.dtype
            or first.shape != second.shape or not first.is_contiguous() or not second.is_contiguous()
            or first.is_conj() or second.is_conj() or first.is_neg() or second.is_neg()):
        return False
    nbytes = first.numel() * first.element_size()
    return nbytes == 0 or _MEMCMP(first.data_ptr(), second.data_ptr(), nbytes) == 0


def same_values(before: torch.Tensor, after: object) -> bool:
    """Exactly equal, NaN meeting NaN included: the same bytes, else compared in chunks as the
    comparison is (COMPARE_CHUNK; -0.0 meets 0.0 there)."""
    if type(after) is not torch.Tensor or after.shape != before.shape or after.dtype != before.dtype:
        return False
    if bitwise_equal(before, after):
        return True
    with_nan = before.is_floating_point() or before.is_complex()
    if before.device.type != "cpu" and after.device == before.device:
        # On a device, whole: a few kernels, where 16K-element chunks would be thousands of launches.
        if with_nan:
            return bool(((before == after) | (before.isnan() & after.isnan())).all())
        return torch.equal(before, after)
    for was, now in _chunks(before, after):
        if with_nan:
            if not bool(((was == now) | (was.isnan() & now.isnan())).all()):
                return False
        elif not torch.equal(was, now):
            return False
    return True


def scaled(tolerances: dict[str, Tolerance], factor: float) -> dict[str, Tolerance]:
    return {dtype: Tolerance(t.atol * factor, t.rtol * factor) for dtype, t in tolerances.items()}


def compare_outputs(
    index: int,
    expected: list[object],
    actual: list[object],
    tolerances: dict[str, Tolerance] = DEFAULT_TOLERANCES,
) -> TrialResult:
    """Both lists hold CPU tensors (device already checked in the child)."""
    if len(actual) != len(expected):
        return TrialResult(index, False, error=f"{len(actual)} outputs, expected {len(expected)}")
    worst_abs, worst_rel, mismatches, numel = 0.0, 0.0, 0, 0
    for position, (want, got) in enumerate(zip(expected, actual, strict=True)):
        where = f"output {position}: " if len(expected) > 1 else ""
        if not isinstance(want, torch.Tensor):
            if got != want:
                return TrialResult(index, False, error=f"{where}{got!r} != expected {want!r}")
            continue
        if type(got) is not torch.Tensor:
            return TrialResult(index, False, error=f"{where}got {describe(got)}, expected a torch.Tensor")
        if got.shape != want.shape:
            return TrialResult(
                index, False, error=f"{where}shape {tuple(got.shape)}, expected {tuple(want.shape)}"
            )
        if got.dtype != want.dtype:
            return TrialResult(index, False, error=f"{where}dtype {got.dtype}, expected {want.dtype}")
        if bitwise_equal(want, got):  # the same bytes: no error to measure
            numel += want.numel()
            continue
        tolerance = tolerances.get(str(want.dtype).removeprefix("torch."), Tolerance(0.0, 0.0))
        abs_err, rel_err, bad = _element_errors(want, got, tolerance)
        worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel_err)
        mismatches += bad
        numel += want.numel()
    error = None
    if mismatches:
        error = f"{mismatches} of {numel} elements outside tolerance (max abs error {worst_abs:.3g})"
    return TrialResult(index, mismatches == 0, worst_abs, worst_rel, mismatches, numel, error)


# Elements compared at a time. Small enough that no ATen op on a chunk starts an OpenMP parallel
# region (ATen runs an op serially below its grain size, 32768 elements): the parent compares
# beside the test's other xdist workers and their children, each with a thread per core, and a
# parallel region per op then waits for threads that are not scheduled. On the H100 machine
# (16 cores, 6 test workers) comparing the timed outputs of a 16M-element candidate took over
# five minutes with 262144-element chunks; `python -m experiments.compare_contention`
# prints the table. Chunks (rather than whole tensors) keep the temporaries in cache.
COMPARE_CHUNK = 1 << 14


def _element_errors(want: torch.Tensor, got: torch.Tensor, tolerance: Tolerance):
    """(max abs error, max relative error, elements out of tolerance). Relative errors divide by
    max(|reference|, atol) so near-zero reference values do not dominate the report."""
    worst_abs, worst_rel, bad = 0.0, 0.0, 0
    for want_chunk, got_chunk in _chunks(want, got):
        chunk_abs, chunk_rel, chunk_bad = _chunk_errors(want_chunk, got_chunk, tolerance)
        worst_abs, worst_rel, bad = max(worst_abs, chunk_abs), max(worst_rel, chunk_rel), bad + chunk_bad
    return worst_abs, worst_rel, bad


def _chunks(first: torch.Tensor, second: torch.Tensor):
    """The two (same-shaped) tensors flattened, COMPARE_CHUNK elements of each at a time."""
    first, second = first.reshape(-1), second.reshape(-1)
    for start in range(0, first.numel(), COMPARE_CHUNK):
        yield first[start:start + COMPARE_CHUNK], second[start:start + COMPARE_CHUNK]


def _chunk_errors(want: torch.Tensor, got: torch.Tensor, tolerance: Tolerance):
    if not want.numel():
        return 0.0, 0.0, 0
    if not (want.is_floating_point() or want.is_complex()):
        bad = int((want != got).sum())
        worst = float((want.double() - got.double()).abs().max())
        return worst, worst, bad
    compute_dtype = torch.float64 if want.dtype == torch.float64 else torch.float32
    want, got = want.to(compute_dtype), got.to(compute_dtype)
    # The common case in half the ops: every element inside the tolerance and the worst error
    # finite. A NaN on either side makes `diff` NaN, never <= the bound; an infinite reference
    # makes the bound infinite too, so an infinite worst error goes the long way.
    diff = (got - want).abs_()
    magnitude = want.abs()
    bound = magnitude * tolerance.rtol + tolerance.atol
    within = bool((diff <= bound).all())
    # Also a wrong chunk of finite numbers (a finite difference means both sides are finite): an
    # element is wrong exactly when its difference exceeds the bound, so the long way below
    # would count the same with twice the operations (a wrong 16M-element output: 1,024 chunks).
    if within or bool(diff.isfinite().all()):
        worst = float(diff.max())
        if math.isfinite(worst):
            bad = 0 if within else int((diff > bound).sum())
            return worst, float(diff.div_(magnitude.clamp_min_(max(tolerance.atol, 1e-12))).max()), bad
    # The long way, on the same differences: non-finite elements are judged apart below. Only
    # element-wise ops and reductions, which stay serial below the grain size: boolean-mask
    # indexing (`got[outside]`) starts a parallel region at any size, and with half of a 16M
    # output wrong it took 241 s beside eight building workers on the H100 machine.
    finite = torch.isfinite(want) & torch.isfinite(got)
    magnitude.nan_to_num_(nan=0.0, posinf=0.0)
    diff = torch.where(finite, diff, 0.0)
    outside = ~finite | (diff > magnitude * tolerance.rtol + tolerance.atol)
    # NaN meeting NaN, or an infinity meeting the same infinity, is a match.
    wrong = outside & ~((got == want) | (got.isnan() & want.isnan()))
    bad = int(wrong.sum())
    if bad and bool((wrong & ~finite).any()):
        return float("inf"), float("inf"), bad
    relative = diff / magnitude.clamp_min_(max(tolerance.atol, 1e-12))
    return float(diff.max()), float(relative.max()), bad
