"""The filters as pytest items under pytest-xdist (`--cudaagent-synth`), on the CPU: a kept task
passes, a dropped one fails with its reason, and every verdict lands in the JSONL file."""

from __future__ import annotations

import json
import subprocess
import sys

from .test_filters import HONEST, task


def test_filters_run_as_xdist_items_with_verdicts_in_jsonl(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "honest.py").write_text(HONEST)
    (tasks / "constant.py").write_text(task("return x - x"))
    out = tmp_path / "verdicts.jsonl"
    # A test file in the folder pytest starts in: with no paths on the command line, only the
    # tasks are collected, not this.
    (tmp_path / "test_not_collected.py").write_text("def test_fails():\n    assert False\n")
    completed = subprocess.run(
        # A wide window: on a loaded CI machine the batch-size estimate is noisy; this checks
        # the plumbing, test_filters.py the window itself.
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-rA", "--cudaagent-device", "cpu",
         "--cudaagent-synth", str(tasks), "--cudaagent-synth-out", str(out), "--cudaagent-synth-window", "0.001,1000"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 1, completed.stdout[-3000:] + completed.stderr[-2000:]  # one dropped
    assert "1 failed, 1 passed" in completed.stdout
    assert "created: 2/2 workers" in completed.stdout  # run through two xdist workers
    assert "dropped: constant_output" in completed.stdout
    verdicts = {json.loads(line)["problem"].rsplit("/", 1)[-1]: json.loads(line) for line in out.read_text().splitlines()}
    assert set(verdicts) == {"honest.py", "constant.py"}
    assert verdicts["honest.py"]["kept"] and 0.001 <= verdicts["honest.py"]["eager_ms"] <= 1000.0
    assert verdicts["constant.py"]["reasons"] == ["constant_output"]


def test_a_missing_path_is_a_usage_error(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cudaagent-synth",
                                str(tmp_path / "nowhere")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 4 and "no such file or directory" in completed.stderr


def test_a_bad_window_says_what_it_takes(tmp_path):
    (tmp_path / "t.py").write_text(HONEST)
    completed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--cudaagent-synth",
                                str(tmp_path / "t.py"), "--cudaagent-synth-window", "fast"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 4 and "MIN_MS,MAX_MS" in completed.stderr  # a usage error
