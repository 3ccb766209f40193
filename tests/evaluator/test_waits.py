"""Waits that speak (#45): a wait for the timing lock or the device names what it waits for and
who holds it (this run or another, its pid and command); a timing beside other work says whose
work it was; `bench`'s progress line shows the run's waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import pytest

from benchmark.progress import progress_description
from pytest_cudaagent.timing import waits
from pytest_cudaagent.timing.locks import device_lock, note_path

# Another run holding a lock for `seconds`: prints "held" once it has it.
HOLDER = textwrap.dedent("""
    import sys, time
    from pytest_cudaagent.timing.locks import device_lock, device_work
    kind, seconds = sys.argv[1], float(sys.argv[2])
    with (device_lock("cpu", 0.1) if kind == "timing" else device_work("cpu")):
        print("held", flush=True)
        time.sleep(seconds)
""")


@pytest.fixture
def private_locks(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv(waits.RUN_ID_ENV, "this-run")
    monkeypatch.delenv(waits.STATUS_DIR_ENV, raising=False)
    monkeypatch.setattr(waits, "SPEAK_AFTER_S", 0.2)
    return tmp_path


def _other_run(kind: str, seconds: float) -> subprocess.Popen:
    env = dict(os.environ, CUDAAGENT_RUN_ID="other-run", CUDAAGENT_RUN_COMMAND="cudaagent bench --out elsewhere")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, kind, str(seconds)], env=env,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_wait_for_the_timing_lock_names_the_other_runs_holder(private_locks, capfd):
    holder = _other_run("timing", 2.0)
    note = waits.read_note(note_path("cpu"))
    assert note["pid"] == holder.pid and note["run"] == "other-run"
    with device_lock("cpu", 0.1):
        pass
    holder.wait()
    said = capfd.readouterr().err
    assert "cudaagent: waiting" in said and "for the timing lock of cpu, held by pid" in said
    assert f"pid {holder.pid} of another run (cudaagent bench --out elsewhere)" in said
    assert not note_path("cpu").exists()  # the note goes with the hold


def test_a_wait_that_ends_at_once_says_nothing(private_locks, capfd):
    with device_lock("cpu", 0.1):
        pass
    assert "waiting" not in capfd.readouterr().err


def test_a_timing_beside_another_runs_work_says_whose_it_was_and_what_to_do(private_locks):
    holder = _other_run("work", 3.0)
    with device_lock("cpu", quiet_wait_s=0.5) as hold:
        assert not hold.quiet
    holder.wait()
    assert f"pid {holder.pid} of another run (cudaagent bench --out elsewhere)" in hold.beside
    assert "run one at a time" in hold.beside and "--resume" in hold.beside


def test_this_runs_own_stuck_work_is_named_as_this_runs(private_locks, monkeypatch):
    monkeypatch.setenv("CUDAAGENT_RUN_ID", "other-run")  # the holder below inherits it: the same run
    holder = _other_run("work", 3.0)
    with device_lock("cpu", quiet_wait_s=0.5) as hold:
        assert not hold.quiet
    holder.wait()
    assert "of this run" in hold.beside and "--timeout" in hold.beside and "another run" not in hold.beside


def test_under_bench_a_wait_goes_to_the_status_dir_and_leaves_with_the_wait(private_locks, monkeypatch):
    status_dir = private_locks / "status"
    monkeypatch.setenv(waits.STATUS_DIR_ENV, str(status_dir))
    release = threading.Event()
    seen = []

    def watch():
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            seen.extend(waits.waiting_lines(status_dir))
            time.sleep(0.05)
        release.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    with waits.waiting("the timing lock of cpu", holders=lambda: "pid 1 of another run (x), for 3 s"):
        release.wait(10)
    watcher.join()
    assert seen and seen[0].startswith("waiting") and "held by pid 1 of another run (x)" in seen[0]
    assert waits.waiting_lines(status_dir) == [] and not list(status_dir.glob("*.json"))


def test_the_progress_line_shows_the_longest_wait():
    waits_now = ["waiting 12 s for the timing lock of cpu, held by pid 7 of another run (cudaagent verify a b)",
                 "waiting 3 s for the device"]
    text = progress_description(Counter(passed=2), waits_now)
    assert "passed 2" in text and "held by pid 7 of another run" in text and "(+1 more)" in text
    assert "waiting" not in progress_description(Counter(passed=2), [])


def test_notes_name_the_command_and_run(private_locks, monkeypatch):
    monkeypatch.setenv(waits.RUN_COMMAND_ENV, "cudaagent verify p.py c.py")
    path = private_locks / "note.json"
    waits.write_note(path, pid=4321)
    note = json.loads(path.read_text())
    assert note["pid"] == 4321 and note["by"] == os.getpid() and note["run"] == "this-run"
    assert waits.describe(note).startswith("pid 4321 of this run (cudaagent verify p.py c.py), for ")
    assert waits.describe(dict(note, run="x")).startswith("pid 4321 of another run")
