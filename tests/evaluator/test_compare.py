import pytest
import torch

from pytest_cudaagent.core.compare import compare_outputs
from pytest_cudaagent.core.config import STRICT_TOLERANCES


def test_equal_outputs_pass_with_zero_error():
    x = torch.randn(32, 32)
    trial = compare_outputs(0, [x], [x.clone()])
    assert trial.correct and trial.mismatches == 0 and trial.max_abs_error == 0.0


def test_error_within_tolerance_passes_and_is_reported():
    x = torch.randn(64)
    trial = compare_outputs(0, [x], [x + 1e-3])
    assert trial.correct
    assert 0.0009 < trial.max_abs_error < 0.0011


def test_one_element_outside_tolerance_fails_with_count():
    x = torch.randn(64)
    y = x.clone()
    y[5] += 1.0
    trial = compare_outputs(3, [x], [y])
    assert not trial.correct and trial.mismatches == 1 and trial.index == 3
    assert "1 of 64" in trial.error


def test_strict_tolerance_rejects_what_default_accepts():
    x = torch.randn(64)
    assert compare_outputs(0, [x], [x + 5e-3]).correct
    assert not compare_outputs(0, [x], [x + 5e-3], STRICT_TOLERANCES).correct


def test_nan_positions_must_match():
    x = torch.randn(16)
    y = x.clone()
    y[2] = float("nan")
    assert not compare_outputs(0, [x], [y]).correct
    x[2] = float("nan")
    assert compare_outputs(0, [x], [y]).correct


def test_infinities_must_match_in_sign():
    x = torch.randn(16)
    x[0] = float("inf")
    same, flipped = x.clone(), x.clone()
    flipped[0] = float("-inf")
    assert compare_outputs(0, [x], [same]).correct
    assert not compare_outputs(0, [x], [flipped]).correct


def test_shape_that_would_broadcast_is_rejected():
    trial = compare_outputs(0, [torch.zeros(4, 4)], [torch.zeros(4)])
    assert not trial.correct and "shape" in trial.error


def test_wrong_dtype_is_rejected():
    trial = compare_outputs(0, [torch.zeros(4)], [torch.zeros(4, dtype=torch.float64)])
    assert not trial.correct and "dtype" in trial.error


def test_wrong_output_count_and_non_tensor_are_rejected():
    assert not compare_outputs(0, [torch.zeros(2), torch.zeros(2)], [torch.zeros(2)]).correct
    trial = compare_outputs(0, [torch.zeros(2)], [[0.0, 0.0]])
    assert not trial.correct and "torch.Tensor" in trial.error


def test_integer_outputs_compare_exactly():
    x = torch.arange(10)
    y = x.clone()
    y[9] += 1
    assert compare_outputs(0, [x], [x.clone()]).correct
    assert not compare_outputs(0, [x], [y]).correct


def test_half_outputs_use_their_own_tolerance():
    x = torch.randn(100).half()
    assert compare_outputs(0, [x], [(x.float() + 4e-3).half()]).correct


def test_chunked_comparison_counts_and_reports_across_chunk_boundaries(monkeypatch):
    """Errors in different chunks add up, the worst error is the worst of all chunks, and a
    non-contiguous output is paired element by element with the reference."""
    from pytest_cudaagent.core import compare

    monkeypatch.setattr(compare, "COMPARE_CHUNK", 7)
    want = torch.linspace(-3, 3, 60).reshape(6, 10)
    got = want.t().contiguous().t().clone()  # same values, column-major strides
    got[0, 1] += 1.0
    got[5, 9] -= 2.0
    got[3, 3] = float("nan")
    result = compare_outputs(0, [want], [got])
    assert result.mismatches == 3 and result.numel == 60
    assert result.max_abs_error == float("inf")  # a NaN against a number
    finite = got.clone()
    finite[3, 3] = want[3, 3]
    result = compare_outputs(0, [want], [finite])
    assert result.mismatches == 2 and abs(result.max_abs_error - 2.0) < 1e-6


def test_a_chunk_is_compared_serially_so_busy_cores_cannot_stall_the_comparison():
    """Each op on a chunk must stay below ATen's grain size (32768 elements, reductions included):
    above it every op starts an OpenMP parallel region, and beside other busy processes the
    comparison of one candidate's timed outputs took minutes on the H100 machine."""
    from pytest_cudaagent.core import compare

    aten_grain_size = 32768
    assert compare.COMPARE_CHUNK < aten_grain_size
    want = torch.randn(3 * compare.COMPARE_CHUNK + 5)
    got = want.clone()
    got[-1] += 1.0
    got[compare.COMPARE_CHUNK] -= 3.0
    result = compare_outputs(0, [want], [got])
    assert result.mismatches == 2 and abs(result.max_abs_error - 3.0) < 1e-6


def test_infinities_and_nans_against_numbers_are_mismatches_however_loose_the_tolerance():
    """The quick path (all inside the tolerance) must not take an infinite reference's infinite
    bound as room for any value, nor a NaN for a match; matching specials still match."""
    from pytest_cudaagent.core.config import Tolerance

    loose = {"float32": Tolerance(0.5, 0.5)}
    inf, nan = float("inf"), float("nan")
    for want, got in [([inf, 1.0], [5.0, 1.0]), ([-inf, 1.0], [-1e30, 1.0]), ([1.0, 2.0], [inf, 2.0]),
                      ([nan, 1.0], [0.0, 1.0]), ([1.0, 2.0], [nan, 2.0])]:
        result = compare_outputs(0, [torch.tensor(want)], [torch.tensor(got)], loose)
        assert not result.correct and result.mismatches == 1, (want, got, result)
        assert result.max_abs_error == inf
    same = torch.tensor([inf, -inf, nan, 1.0])
    result = compare_outputs(0, [same], [same.clone()], loose)
    assert result.correct and result.max_abs_error == 0.0


def test_same_values_sees_one_changed_element_in_any_chunk_and_lets_nan_meet_nan():
    from pytest_cudaagent.core.compare import COMPARE_CHUNK, same_values

    before = torch.randn(3 * COMPARE_CHUNK + 5)
    before[7] = float("nan")
    assert same_values(before, before.clone())
    for position in (0, COMPARE_CHUNK + 1, before.numel() - 1):  # first, middle and last (partial) chunk
        after = before.clone()
        after[position] += 1.0
        assert not same_values(before, after), position
    moved_nan = before.clone()
    moved_nan[7], moved_nan[8] = 0.0, float("nan")
    assert not same_values(before, moved_nan)
    counts = torch.arange(2 * COMPARE_CHUNK)
    changed = counts.clone()
    changed[-1] = -1
    assert same_values(counts, counts.clone()) and not same_values(counts, changed)
    assert not same_values(counts, counts.float()) and not same_values(counts, counts[:-1])
    assert not same_values(counts, counts.tolist())


def test_bitwise_equal_tells_the_same_bytes_and_declines_what_it_cannot_read_in_one_piece():
    from pytest_cudaagent.core.compare import COMPARE_CHUNK, bitwise_equal, same_values

    before = torch.randn(3 * COMPARE_CHUNK + 5)
    assert bitwise_equal(before, before.clone())
    for position in (0, COMPARE_CHUNK + 1, before.numel() - 1):
        after = before.clone()
        after[position] = torch.nextafter(after[position], torch.tensor(float("inf")))  # one ulp
        assert not bitwise_equal(before, after) and not same_values(before, after), position
    # Declined (False), and same_values then judges element-wise: a transposed view, -0.0 against
    # 0.0, two NaNs of different bit patterns, another dtype.
    square = torch.randn(64, 64)
    assert not bitwise_equal(square.t(), square.t().clone()) and same_values(square.t(), square.t().clone())
    zeros, negative_zeros = torch.zeros(8), -torch.zeros(8)
    assert not bitwise_equal(zeros, negative_zeros) and same_values(zeros, negative_zeros)
    quiet = torch.full((4,), float("nan"))
    other_nan = quiet.view(torch.int32).clone().add_(1).view(torch.float32)
    assert other_nan.isnan().all() and not bitwise_equal(quiet, other_nan) and same_values(quiet, other_nan)
    assert not bitwise_equal(zeros, zeros.double()) and not bitwise_equal(zeros, zeros[:-1])
    assert bitwise_equal(torch.empty(0), torch.empty(0))


def test_identical_outputs_are_judged_without_the_element_wise_pass(monkeypatch):
    import pytest_cudaagent.core.compare as compare

    def element_wise(*_):
        raise AssertionError("identical bytes need no element-wise pass")

    want = torch.randn(1000)
    monkeypatch.setattr(compare, "_element_errors", element_wise)
    result = compare.compare_outputs(0, [want, 3], [want.clone(), 3])
    assert result.correct and result.mismatches == 0 and result.numel == 1000 and result.max_abs_error == 0.0
    with pytest.raises(AssertionError, match="element-wise"):  # one ulp off: the element-wise way
        compare.compare_outputs(0, [want], [want + 1e-6])


def test_a_reference_rerun_is_the_same_answer_only_when_exactly_equal():
    """worker.same_as_recorded: the fast path of the reference's rerun of a failed trial; anything
    but exact equality goes the tolerance's way, as before."""
    from pytest_cudaagent.workers.worker import same_as_recorded

    recorded = [torch.tensor([1.0, float("nan"), float("inf")]), 3]
    assert same_as_recorded(recorded, [recorded[0].clone(), 3])
    assert not same_as_recorded(recorded, [torch.tensor([1.0, float("nan"), 2.0]), 3])
    assert not same_as_recorded(recorded, [recorded[0].clone()])
    assert not same_as_recorded(recorded, [recorded[0].double(), 3])
    assert not same_as_recorded(recorded, [recorded[0].clone(), 4])
    assert not same_as_recorded(recorded, [[1.0, float("nan"), float("inf")], 3])
    assert not same_as_recorded([recorded[0]], [recorded[0] + 1e-7])


def test_a_wrong_chunk_of_finite_numbers_counts_as_the_long_way_does():
    """compare._chunk_errors: a chunk of finite numbers outside the tolerance takes a short path;
    it must report what the long way (non-finite values among them) reports for the same numbers."""
    from pytest_cudaagent.core.compare import _chunk_errors
    from pytest_cudaagent.core.config import Tolerance

    torch.manual_seed(3)
    tolerance = Tolerance(1e-2, 1e-2)
    want = torch.randn(4096)
    got = want.clone()
    got[::3] += torch.rand(1366) * 0.05  # some inside, some outside the bound
    got[7] = want[7]
    short = _chunk_errors(want, got, tolerance)
    # The same numbers plus one NaN meeting a NaN, which only the long way handles and which
    # changes none of the counts.
    want_nan, got_nan = torch.cat([want, torch.tensor([float("nan")])]), torch.cat([got, torch.tensor([float("nan")])])
    long = _chunk_errors(want_nan, got_nan, tolerance)
    assert short[2] == long[2] and short[2] > 0
    assert short[0] == pytest.approx(long[0]) and short[1] == pytest.approx(long[1])
    expected_bad = int(((got - want).abs() > want.abs() * 1e-2 + 1e-2).sum())
    assert short[2] == expected_bad
