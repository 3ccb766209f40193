"""reward_latency's progress lines: how many candidates a scorer had scored, every few seconds,
so a run cut short by a device call's limit still says how fast each scorer went."""

import json
import time
from concurrent.futures import Future

from experiments.reward_latency import progress_log, scored_so_far


def finished(value: float) -> Future:
    future = Future()
    future.set_result(value)
    return future


def test_scored_so_far_counts_finished_futures_or_written_results(tmp_path):
    futures = [finished(1.0), finished(-1.0), Future()]
    assert scored_so_far(futures, tmp_path / "absent") == 2  # the pool: its futures finish one by one
    batch = tmp_path / "batch-00000"
    batch.mkdir()
    (batch / "results.jsonl").write_text('{"status": "passed"}\n' * 3 + "\n")
    assert scored_so_far([Future() for _ in range(5)], tmp_path) == 3  # xdist: lines written so far


def test_progress_lines_are_written_while_the_batch_runs(tmp_path):
    futures: list = []
    log = tmp_path / "xdist-progress-0.jsonl"

    def lines() -> list[dict]:
        text = log.read_text() if log.exists() else ""
        return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]  # whole lines only

    def wait_for(scored: int) -> None:  # polled, not slept: a busy CI box delays the sampler
        deadline = time.monotonic() + 30
        while not any(line["scored"] == scored for line in lines()):
            assert time.monotonic() < deadline, lines()
            time.sleep(0.02)

    with progress_log(log, futures, tmp_path, every_s=0.05):
        wait_for(0)
        futures.append(finished(1.0))
        wait_for(1)
    written = lines()
    assert written[0]["scored"] == 0 and written[-1]["scored"] == 1
    assert all(a["seconds"] <= b["seconds"] for a, b in zip(written, written[1:], strict=False))
    assert written[-1]["seconds"] > written[0]["seconds"]
