"""Loading KernelBench problem sets: clone trees, dataset files, selection, levels of paths."""

import json

import pandas as pd
import pytest

from benchmark.kernelbench import (
    EXAMPLES_PROBLEMS,
    is_dataset,
    level_of,
    load_dataset,
    load_flat,
    load_kernelbench,
    load_tree,
    select,
)

from .bench_helpers import PROBLEM, TREE, make_kernelbench_tree


def test_tree_loads_levels_ids_and_names_from_clone_root_or_its_kernelbench_dir(tmp_path):
    make_kernelbench_tree(tmp_path)
    for root in (tmp_path, tmp_path / "KernelBench"):
        problems = load_tree(root)
        assert [(p.level, p.problem_id, p.name) for p in problems] == [
            ("1", 1, "1_Tiny_relu.py"), ("1", 2, "2_Tiny_scale.py"), ("2", 1, "1_Tiny_relu_add.py")]
        assert problems[0].level_key == "level1"


def test_tree_error_says_what_to_give(tmp_path):
    with pytest.raises(FileNotFoundError, match="KernelBench clone"):
        load_tree(tmp_path)


def test_select_by_level_id_and_name_pattern(tmp_path):
    problems = load_tree(make_kernelbench_tree(tmp_path))
    assert [p.name for p in select(problems, levels=["2"])] == ["1_Tiny_relu_add.py"]
    assert [p.name for p in select(problems, levels=["level1"], ids=[2])] == ["2_Tiny_scale.py"]
    assert [p.name for p in select(problems, name_pattern="relu")] == ["1_Tiny_relu.py", "1_Tiny_relu_add.py"]
    assert [p.name for p in select(problems, name_pattern="*_scale.py")] == ["2_Tiny_scale.py"]


def _rows():
    return [{"code": PROBLEM.format(expression=expression), "level": int(level),
             "problem_id": int(name.split("_")[0]), "name": name.removesuffix(".py")}
            for level, name, expression in TREE]


@pytest.mark.parametrize("form", ["parquet", "json", "jsonl"])
def test_dataset_rows_are_written_as_level_files(tmp_path, form):
    data = tmp_path / "data"
    data.mkdir()
    if form == "parquet":
        pd.DataFrame(_rows()).to_parquet(data / "level_1-00000-of-00001.parquet")
    elif form == "json":
        (data / "kernelbench.json").write_text(json.dumps({"level_1": _rows()}))
    else:
        (data / "kernelbench.jsonl").write_text("\n".join(json.dumps(row) for row in _rows()))
    assert is_dataset(data)
    problems = load_kernelbench(data, tmp_path / "materialized")
    assert [(p.level, p.problem_id, p.name) for p in problems] == [
        ("1", 1, "1_Tiny_relu.py"), ("1", 2, "2_Tiny_scale.py"), ("2", 1, "1_Tiny_relu_add.py")]
    assert problems[2].path == tmp_path / "materialized" / "level2" / "1_Tiny_relu_add.py"
    assert "torch.relu(x) + 1.0" in problems[2].path.read_text()
    assert level_of(problems[2].path) == "2"


def test_dataset_without_code_column_is_refused(tmp_path):
    (tmp_path / "rows.json").write_text(json.dumps([{"level": 1, "name": "x"}]))
    with pytest.raises(ValueError, match="code"):
        load_dataset(tmp_path / "rows.json", tmp_path / "out")


def test_level_of_paths():
    assert level_of("/x/KernelBench/level3/5_Net.py") == "3"
    assert level_of("/x/problems/y.py", "/c/level_2_problem_7_sample_0_kernel.py") == "2"
    assert level_of(EXAMPLES_PROBLEMS / "softmax.py") == "examples"
    assert level_of("/somewhere/else/problem.py") == "custom"


def test_flat_directory_of_examples():
    problems = load_flat(EXAMPLES_PROBLEMS)
    assert {p.name for p in problems} >= {"leaky_relu.py", "softmax.py"}
    assert {p.level for p in problems} == {"examples"}
