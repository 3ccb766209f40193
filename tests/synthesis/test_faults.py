"""A synthesis run killed while writing its manifest, sessions and a task file, then resumed:
the same candidates, each once, the cut line reported, no temporary file left."""

import json

from synthesis.manifest import Manifest
from synthesis.pipeline import run_synthesis

from .test_pipeline import config_for


def _cut_last_line(path):
    text = path.read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    path.write_text(text[: len(text) - len(last) - 1] + last[: len(last) // 2])
    return json.loads(last)


def test_resume_after_a_kill_mid_write_gives_the_same_tasks(tmp_path, small_catalogue, tiny_sizes, cpu_filters, capsys):
    config = config_for(tmp_path, small_catalogue, tiny_sizes, cpu_filters, 4)
    whole = run_synthesis(config)
    run = tmp_path / "run"
    verdicts = dict(zip(whole["id"], whole["kept"], strict=True))

    cut = _cut_last_line(run / "manifest.jsonl")  # killed while appending the last record
    (run / "sessions.jsonl").write_text((run / "sessions.jsonl").read_text() + '{"session": 1, "star')
    leftover = run / "tasks" / f"{cut['id']}.py.tmp-999999"  # killed while writing a task file
    leftover.write_text("class Model(")
    before = Manifest(run)
    assert cut["id"] not in before.records and "manifest.jsonl" in before.skipped_message
    assert "line 4" in before.skipped_message

    capsys.readouterr()
    config.resume = True
    resumed = run_synthesis(config)
    assert "skipped 1 unreadable line" in capsys.readouterr().err
    assert sorted(resumed["id"]) == sorted(verdicts) and resumed["id"].is_unique
    assert dict(zip(resumed["id"], resumed["kept"], strict=True)) == verdicts
    assert not leftover.exists()
    kept_files = {path.stem for path in (run / "tasks").iterdir()}
    assert kept_files == {task_id for task_id, kept in verdicts.items() if kept}
    assert [session["session"] for session in Manifest(run).sessions()] == [0, 1]
