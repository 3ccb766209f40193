"""The NumPy comparison of host floating-point outputs (compare._numpy_errors) gives the answers
the ATen chunks give (compare._chunk_errors): the same count of elements out of tolerance, the
same worst absolute and relative errors, NaN meeting NaN and an infinity meeting the same
infinity as matches, across chunk boundaries and for every dtype it takes."""

import math

import pytest
import torch

from pytest_cudaagent.core import compare
from pytest_cudaagent.core.config import Tolerance


def torch_way(want, got, tolerance):
    worst_abs, worst_rel, bad = 0.0, 0.0, 0
    for want_chunk, got_chunk in compare._chunks(want, got):
        chunk_abs, chunk_rel, chunk_bad = compare._chunk_errors(want_chunk, got_chunk, tolerance)
        worst_abs, worst_rel, bad = max(worst_abs, chunk_abs), max(worst_rel, chunk_rel), bad + chunk_bad
    return worst_abs, worst_rel, bad


def cases(dtype):
    generator = torch.Generator().manual_seed(7)
    want = torch.randn(10_000, generator=generator).to(dtype)
    yield "close", want, want + (torch.randn(10_000, generator=generator) * 1e-4).to(dtype)
    wrong = want.clone()
    wrong[::97] += 1.0
    yield "some wrong", want, wrong
    with_nan = want.clone()
    with_nan[5], with_nan[9_999] = float("nan"), float("inf")
    yield "a NaN and an infinity the reference lacks", want, with_nan
    both = want.clone()
    both[3] = both[4] = float("nan")
    both[6] = float("inf")
    yield "NaN meeting NaN, infinity meeting infinity", both, both.clone()
    other_inf = both.clone()
    other_inf[6] = float("-inf")
    yield "an infinity of the other sign", both, other_inf
    yield "all wrong", want, want + 5
    yield "empty", want[:0], want[:0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1000, 1 << 18])
def test_the_numpy_way_judges_as_the_aten_chunks_do(dtype, chunk, monkeypatch):
    monkeypatch.setattr(compare, "NUMPY_CHUNK", chunk)
    tolerance = Tolerance(1e-2, 1e-2)
    for name, want, got in cases(dtype):
        expected = torch_way(want, got, tolerance)
        found = compare._numpy_errors(want, got, tolerance)
        assert found[2] == expected[2], name
        for ours, theirs in zip(found[:2], expected[:2], strict=True):
            assert (math.isinf(ours) and math.isinf(theirs)) or ours == pytest.approx(theirs, rel=1e-6, abs=0), name



@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_large_output_is_compared_by_several_threads_with_the_same_answers(dtype, monkeypatch):
    """Parts cut on chunk boundaries, compared at once: the same count of wrong elements, the
    same worst errors (wherever they fall: the first part, the last, or across a cut), NaN and
    infinities judged as one thread judges them."""
    monkeypatch.setattr(compare, "NUMPY_CHUNK", 1000)
    monkeypatch.setattr(compare, "COMPARE_THREAD_ELEMENTS", 2500)
    monkeypatch.setattr("pytest_cudaagent.system.cores.usable_cores", lambda: 4)
    threads = []
    original = compare._numpy_part_errors
    monkeypatch.setattr(compare, "_numpy_part_errors",
                        lambda *a: threads.append(__import__("threading").current_thread().name) or original(*a))
    assert compare.compare_threads(10_000) == 4 and compare.compare_threads(2_000) == 1
    tolerance = Tolerance(1e-2, 1e-2)
    for name, want, got in cases(dtype):
        threads.clear()
        expected = torch_way(want, got, tolerance)
        found = compare._numpy_errors(want, got, tolerance)
        assert found[2] == expected[2], name
        for ours, theirs in zip(found[:2], expected[:2], strict=True):
            assert (math.isinf(ours) and math.isinf(theirs)) or ours == pytest.approx(theirs, rel=1e-6, abs=0), name
        if want.numel() >= 10_000:
            assert len(threads) == 4 and all(name.startswith("cudaagent-compare") for name in threads), name
    # The worst error in the last part only, and one wrong element at a cut's either side.
    want = torch.zeros(10_000, dtype=dtype)
    got = want.clone()
    got[9_999], got[2_999], got[3_000] = 4.0, 1.0, 1.0
    assert compare._numpy_errors(want, got, tolerance) == (4.0, pytest.approx(400.0), 3)


def test_compare_outputs_takes_the_numpy_way_for_host_floats(monkeypatch):
    taken = []
    original = compare._numpy_errors
    monkeypatch.setattr(compare, "_numpy_errors", lambda *a: taken.append(1) or original(*a))
    want = torch.randn(1000)
    result = compare.compare_outputs(0, [want], [want + 0.5])
    assert taken and not result.correct and result.mismatches > 0
    ints = torch.arange(10)
    assert compare.compare_outputs(0, [ints], [ints + 1]).mismatches == 10 and len(taken) == 1  # integers: ATen
