"""system/start_trace.py (CUDAAGENT_TRACE) and experiments/start_trace.py, which reads its marks."""

import json
import os
import time

import pytest
from rich.console import Console

from experiments import start_trace as experiment
from pytest_cudaagent.system import start_trace


def test_marks_are_written_only_where_a_trace_is_asked_for(tmp_path, monkeypatch):
    trace = tmp_path / "trace.jsonl"
    monkeypatch.delenv("CUDAAGENT_TRACE", raising=False)
    start_trace.mark("nothing")
    assert start_trace.created() is None and not trace.exists()
    monkeypatch.setenv("CUDAAGENT_TRACE", str(trace))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    before = time.time()
    start_trace.mark("item.start", pair="a")
    (mark,) = [json.loads(line) for line in trace.read_text().splitlines()]
    assert mark["event"] == "item.start" and mark["pair"] == "a" and mark["xdist"] == "gw3"
    assert before <= mark["t"] <= time.time()
    created = start_trace.created()
    assert created is not None and before - 3600 < created <= before  # this process began before the mark


def test_a_trace_named_relative_to_the_users_directory_is_one_file_for_every_process(tmp_path, monkeypatch):
    """pytest runs in the run's directory and the workers in their scratch: a relative name is
    made absolute by the first mark, before any of them starts."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDAAGENT_TRACE", "trace.jsonl")
    start_trace.mark("cli.start")
    assert os.environ["CUDAAGENT_TRACE"] == str(tmp_path / "trace.jsonl")
    monkeypatch.chdir(tmp_path / "elsewhere")
    start_trace.mark("pytest.configure")
    assert [json.loads(line)["event"] for line in (tmp_path / "trace.jsonl").read_text().splitlines()] == [
        "cli.start", "pytest.configure"]
    assert not (tmp_path / "elsewhere" / "trace.jsonl").exists()


def _synthetic(path, workers=2):
    """Two xdist workers' marks, as a run writes them (seconds after 1000)."""
    rows = [{"t": 1000.0, "pid": 1, "xdist": None, "event": "cli.start", "created": 999.5}]
    for index in range(workers):
        worker = f"gw{index}"
        for t, event, extra in ((1001.0, "pytest.configure", {"created": 1000.2}), (1001.1, "pytest.collected", {}),
                                (1001.3, "zygote.start", {"created": 1001.2}), (1003.0, "zygote.ready", {}),
                                (1005.0, "zygote.imported", {"module": "torch._dynamo"}),
                                (1001.2, "item.start", {"pair": "p1"}), (1003.1, "evaluation.imported", {}),
                                (1003.2, "zygote.fork_asked", {}), (1003.3, "zygote.forked", {"child": 9}),
                                (1008.0, "item.end", {"pair": "p1"}), (1008.0, "item.start", {"pair": "p2"}),
                                (1010.0, "item.end", {"pair": "p2"})):
            rows.append({"t": t + index, "pid": 10 + index, "xdist": worker, "event": event, **extra})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return experiment.read_trace(path)


def test_the_first_time_of_each_step_per_worker_and_its_items(tmp_path):
    marks = _synthetic(tmp_path / "trace.jsonl")
    zero = experiment.origin(marks)
    assert zero == 999.5  # the bench's own process start
    rows = experiment.per_worker(marks, zero)
    assert list(rows) == ["gw0", "gw1"]
    assert rows["gw0"]["created"] == pytest.approx(0.7) and rows["gw0"]["ready"] == pytest.approx(3.5)
    assert rows["gw1"]["item end"] == pytest.approx(9.5)
    spans = experiment.items_per_worker(marks, zero)["gw1"]
    assert [value for span in spans for value in span] == pytest.approx([2.7, 9.5, 9.5, 11.5])
    console = Console(width=200, record=True)
    experiment.render(marks, console)
    text = console.export_text()
    assert "median" in text and "zygote.forked" in text


def test_the_plot_is_drawn(tmp_path):
    marks = _synthetic(tmp_path / "trace.jsonl")
    experiment.plot(marks, tmp_path / "start.png")
    assert (tmp_path / "start.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
