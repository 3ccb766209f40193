"""experiments/step_profile.py: results files' median seconds per profile entry, side by side."""

import json

import pytest
from rich.console import Console

from experiments import step_profile


def _results(path, profiles):
    path.write_text("".join(json.dumps({"profile": profile, "phase_seconds": {"reference": profile.get("reference.prepare", 0)}})
                            + "\n" for profile in profiles))
    return path


def _rendered(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_medians_per_entry_and_phase(tmp_path):
    path = _results(tmp_path / "a.jsonl", [{"reference.prepare": 1.0, "reference.prepare.gpu": 0.2},
                                           {"reference.prepare": 3.0},
                                           {"reference.prepare": 2.0, "reference.prepare.gpu": 0.4}])
    rows, found = step_profile.medians(path)
    assert rows == 3
    assert found["reference.prepare"] == 2.0
    assert found["reference.prepare.gpu"] == pytest.approx(0.3)  # over the rows that have it
    assert found["phase:reference"] == 2.0


def test_table_puts_files_side_by_side_with_ratios_to_the_first(tmp_path):
    alone = _results(tmp_path / "alone.jsonl", [{"reference.prepare": 1.0, "compare": 0.001}])
    batch = _results(tmp_path / "batch.jsonl", [{"reference.prepare": 3.0, "compare": 0.002, "parent.lend": 0.5}])
    text = _rendered(step_profile.table({"alone": alone, "batch": batch}, prefix=""))
    line = next(line for line in text.splitlines() if "reference.prepare" in line)
    assert "1.000" in line and "3.000" in line and "3.00" in line
    assert "parent.lend" in text  # only in the second file: shown, with no ratio
    assert "compare" not in text  # under 5 ms in both
    only = _rendered(step_profile.table({"alone": alone, "batch": batch}, prefix="parent."))
    assert "parent.lend" in only and "reference.prepare" not in only


def test_main_refuses_a_file_without_a_label(tmp_path, capsys):
    path = _results(tmp_path / "a.jsonl", [{"reference.prepare": 1.0}])
    with pytest.raises(SystemExit):
        step_profile.main([str(path)])
    assert "LABEL=PATH" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        step_profile.main([f"x={tmp_path / 'missing.jsonl'}"])
    step_profile.main([f"alone={path}"])
    assert "reference.prepare" in capsys.readouterr().out
