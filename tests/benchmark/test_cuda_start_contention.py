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


def _answers(write_fd, release_fd):
    import json
    import os

    os.read(release_fd, 1)
    os.write(write_fd, (json.dumps({step: 0.01 for step in STEPS[:-1]}) + "\n").encode())
    os._exit(0)


def _dies(write_fd, release_fd):
    import os

    os.read(release_fd, 1)
    os._exit(3)


def test_a_wave_forks_its_children_together_and_times_each_ones_exit(monkeypatch):
    """Children forked from this process, released at once; every answer read as it comes and
    every child reaped, so each exit is its own (read in turn, the early ones read 0)."""
    monkeypatch.setattr(cuda_start_contention, "_child", _answers)
    rows = cuda_start_contention.run_wave(3)
    assert len(rows) == 3
    for row in rows:
        assert row["cuda_start"] == 0.01 and 0 <= row["exit"] < 5


def test_a_child_that_dies_before_answering_is_a_row_with_its_status(monkeypatch):
    monkeypatch.setattr(cuda_start_contention, "_child", _dies)
    (row,) = cuda_start_contention.run_wave(1)
    assert "error" in row and "before answering" in row["error"] and "exit" not in row


def _answers_late(write_fd, release_fd):
    import time

    time.sleep(0.3)
    _answers(write_fd, release_fd)


def test_a_wave_reaps_its_own_children_only(monkeypatch):
    """The caller's other children are left to it: a process of its own that ends during the wave
    still reports its own exit code (waitpid(-1) would have taken it)."""
    import subprocess
    import sys

    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
    monkeypatch.setattr(cuda_start_contention, "_child", _answers_late)
    rows = cuda_start_contention.run_wave(2)
    assert all("error" not in row for row in rows)
    assert other.wait(30) == 7
