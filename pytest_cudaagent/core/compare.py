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


# Host tensors of these dtypes are compared with NumPy, in chunks of NUMPY_CHUNK elements: NumPy
# starts no threads, and its call costs a microsecond where ATen's dispatch of the same op costs
# several, so the chunks can be large enough to amortise it. A 64M-element fp32 output with small
# errors: 3.5 s in 16K-element ATen chunks, 0.17 s so on the 2-core CI machine; at KernelBench's
# full sizes (6 GiB outputs, ten correctness calls) the parent's comparison took 43-54 s a pair.
NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
NUMPY_CHUNK = 1 << 18
# Outputs of at least COMPARE_THREAD_ELEMENTS elements per thread are compared by up to
# COMPARE_THREADS threads at once (_numpy_errors).
COMPARE_THREADS = 8
COMPARE_THREAD_ELEMENTS = 1 << 24


def _element_errors(want: torch.Tensor, got: torch.Tensor, tolerance: Tolerance):
    """(max abs error, max relative error, elements out of tolerance). Relative errors divide by
    max(|reference|, atol) so near-zero reference values do not dominate the report."""
    if want.device.type == "cpu" and got.device.type == "cpu" and want.dtype in NUMPY_DTYPES \
            and not (want.is_conj() or got.is_conj() or want.is_neg() or got.is_neg()):
        return _numpy_errors(want, got, tolerance)
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


def _numpy_errors(want: torch.Tensor, got: torch.Tensor, tolerance: Tolerance):
    """_element_errors for host floating-point tensors, the same judgement as _chunk_errors
    (tests/evaluator/test_compare_numpy.py holds the two to the same answers). The temporaries
    are made once and written in place: a fresh 1 MiB array per step is a fresh mapping whose
    pages the kernel zeroes, which made the same comparison ten times slower. A large output is
    cut into contiguous parts compared at once by threads (NumPy's loops let the GIL go): one
    thread took 53 s of a level-1 pair's wall on 5 outputs of 1.6G elements (#38, H200)."""
    want, got = want.reshape(-1), got.reshape(-1)
    parts = compare_threads(want.numel())
    if parts == 1:
        return _numpy_part_errors(want, got, tolerance)
    from ..system.cores import cut, in_threads

    # Cut on chunk boundaries: each part's chunks are the ones one thread would have compared.
    bounds = cut(want.numel(), parts, NUMPY_CHUNK)
    answers = in_threads(lambda part: _numpy_part_errors(want[bounds[part]:bounds[part + 1]],
                                                         got[bounds[part]:bounds[part + 1]], tolerance),
                         parts, "cudaagent-compare")
    return (max(answer[0] for answer in answers), max(answer[1] for answer in answers),
            sum(answer[2] for answer in answers))


def compare_threads(numel: int) -> int:
    """How many threads compare an output of `numel` elements: one per COMPARE_THREAD_ELEMENTS,
    at most COMPARE_THREADS and the cores this process may use."""
    from ..system.cores import usable_cores

    return max(1, min(COMPARE_THREADS, usable_cores(), numel // COMPARE_THREAD_ELEMENTS))


def _numpy_part_errors(want: torch.Tensor, got: torch.Tensor, tolerance: Tolerance):
    """One thread's part: its chunks in order, with temporaries of its own."""
    import numpy as np

    compute = np.float64 if want.dtype == torch.float64 else np.float32
    size = max(1, min(NUMPY_CHUNK, want.numel()))
    buffers = _Buffers(np.empty(size, compute), np.empty(size, compute), np.empty(size, compute),
                       np.empty(size, np.bool_))
    worst_abs, worst_rel, bad = 0.0, 0.0, 0
    with np.errstate(all="ignore"):
        for start in range(0, want.numel(), NUMPY_CHUNK):
            x = _as_numpy(want[start:start + NUMPY_CHUNK], compute)
            y = _as_numpy(got[start:start + NUMPY_CHUNK], compute)
            chunk_abs, chunk_rel, chunk_bad = _numpy_chunk_errors(np, x, y, tolerance, buffers.cut(len(x)))
            worst_abs, worst_rel, bad = max(worst_abs, chunk_abs), max(worst_rel, chunk_rel), bad + chunk_bad
    return worst_abs, worst_rel, bad


class _Buffers:
    """The chunk comparison's temporaries: difference, magnitude, bound, mask."""

    def __init__(self, diff, magnitude, bound, mask):
        self.diff, self.magnitude, self.bound, self.mask = diff, magnitude, bound, mask

    def cut(self, length: int) -> _Buffers:
        return _Buffers(self.diff[:length], self.magnitude[:length], self.bound[:length], self.mask[:length])


def _as_numpy(chunk: torch.Tensor, compute):
    """A chunk as a NumPy array of the compute dtype (fp16 and bf16 widened through torch: NumPy
    has no bfloat16)."""
    if chunk.dtype in (torch.float16, torch.bfloat16):
        chunk = chunk.to(torch.float32)
    return chunk.numpy().astype(compute, copy=False)


def _numpy_chunk_errors(np, want, got, tolerance: Tolerance, buffers: _Buffers):
    if not want.size:
        return 0.0, 0.0, 0
    floor = max(tolerance.atol, 1e-12)
    diff, magnitude, bound, mask = buffers.diff, buffers.magnitude, buffers.bound, buffers.mask
    np.subtract(got, want, out=diff)
    np.abs(diff, out=diff)
    np.abs(want, out=magnitude)
    np.multiply(magnitude, tolerance.rtol, out=bound)
    bound += tolerance.atol
    np.less_equal(diff, bound, out=mask)  # NaN is never within
    within = bool(mask.all())
    if within or bool(np.isfinite(diff).all()):
        worst = float(diff.max())
        if math.isfinite(worst):
            bad = 0 if within else int(mask.size - np.count_nonzero(mask))
            np.maximum(magnitude, floor, out=bound)
            np.divide(diff, bound, out=bound)
            return worst, float(bound.max()), bad
    # The long way (a NaN or an infinity in the chunk), as _chunk_errors takes it.
    finite = np.isfinite(want) & np.isfinite(got)
    magnitude = np.where(np.isfinite(magnitude), magnitude, 0.0).astype(diff.dtype, copy=False)
    diff = np.where(finite, diff, 0.0).astype(diff.dtype, copy=False)
    outside = ~finite | (diff > magnitude * tolerance.rtol + tolerance.atol)
    wrong = outside & ~((got == want) | (np.isnan(got) & np.isnan(want)))
    bad = int(np.count_nonzero(wrong))
    if bad and bool((wrong & ~finite).any()):
        return float("inf"), float("inf"), bad
    return float(diff.max()), float((diff / np.maximum(magnitude, floor)).max()), bad
