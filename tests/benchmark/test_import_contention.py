"""experiments/import_contention.py: N fresh interpreters importing the zygote's modules at once,
each module's seconds per child, and the table made of them (#41)."""

import json

from experiments import import_contention
from experiments.import_contention import summarise


def test_the_table_has_each_module_and_the_total_with_a_failed_import_left_out():
    rows = [{"a": 1.0, "b": 2.0, "missing": None}, {"a": 3.0, "b": 4.0, "missing": None}]
    table = summarise(2, rows, 7.5, ["a", "b", "missing"])
    assert table[0] == {"processes": 2, "module": "a", "median_s": 2.0, "max_s": 3.0}
    assert table[2]["median_s"] is None and table[2]["max_s"] is None
    assert table[3] == {"processes": 2, "module": "(all, in order)", "median_s": 5.0, "max_s": 7.0, "wave_wall_s": 7.5}


def test_a_run_imports_in_fresh_interpreters_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "imports.json"
    assert import_contention.main(["--processes", "1,2", "--modules", "json,csv,no_such_module_here",
                                   "--json", str(out)]) == 0
    table = json.loads(out.read_text())
    assert [(row["processes"], row["module"]) for row in table] == [
        (1, "json"), (1, "csv"), (1, "no_such_module_here"), (1, "(all, in order)"),
        (2, "json"), (2, "csv"), (2, "no_such_module_here"), (2, "(all, in order)")]
    assert all(row["median_s"] >= 0 for row in table if row["module"] in ("json", "csv"))
    assert table[2]["median_s"] is None
    assert "the zygote's imports" in capsys.readouterr().out


def test_bad_counts_are_refused(capsys):
    import pytest

    with pytest.raises(SystemExit):
        import_contention.main(["--processes", "0"])
    assert "--processes" in capsys.readouterr().err
