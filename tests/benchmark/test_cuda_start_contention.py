"""experiments/cuda_start_contention.py off the GPU: the table it prints from the children's rows,
and a clear refusal where no GPU is visible (its waves need one)."""
import pytest

from experiments import cuda_start_contention
from experiments.cuda_start_contention import STEPS, summarise


def _row(scale: float) -> dict:
    return {step: scale * (index + 1) for index, step in enumerate(STEPS)}


def test_each_count_gets_the_median_and_worst_of_every_child_of_every_repeat():
    table = summarise({1: [[_row(1.0)], [_row(3.0)]],
                       8: [[_row(2.0), _row(4.0), {"error": "child exited with 256 before answering"}]]})
    one, eight = table
    assert one["processes"] == 1 and one["children"] == 2 and one["failed"] == 0
    assert one["cuda_start_median_s"] == 2.0 and one["cuda_start_max_s"] == 3.0
    assert one["exit_median_s"] == 8.0  # exit is the fourth step: 4 x the median scale
    assert eight["children"] == 2 and eight["failed"] == 1
    assert eight["first_cublas_median_s"] == 6.0 and eight["first_cublas_max_s"] == 8.0


def test_a_wave_with_no_answer_still_prints_a_row():
    (only,) = summarise({4: [[{"error": "child exited with 256 before answering"}]]})
    assert only["children"] == 0 and only["failed"] == 1 and only["cuda_start_median_s"] is None


def test_without_a_gpu_it_says_where_to_run_it(capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_start_contention.main(["--processes", "1"]) == 2
    assert "run it on the GPU machine" in capsys.readouterr().err


def test_bad_counts_are_refused():
    with pytest.raises(SystemExit):
        cuda_start_contention.main(["--processes", "0"])
