"""The identity set (each problem's own Model as its candidate) and the selection flags that run it."""

import pytest

from benchmark.kernelbench import load_tree
from benchmark.solutions import pair_solutions
from experiments.identity_set import identity_source, main, write_identity_set
from pytest_cudaagent.rules.rules import get_policy

from .bench_helpers import make_kernelbench_tree, run_cli

LEVEL3_STYLE = '''import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width):
        super(Model, self).__init__()
        self.layer = nn.Linear(width, width)

    def forward(self, x):
        return self.layer(x)


class ModelBlock(nn.Module):
    pass
'''


def test_the_model_becomes_modelnew_everywhere_it_is_named_and_nothing_else_does():
    source = identity_source(LEVEL3_STYLE)
    assert "class ModelNew(nn.Module)" in source
    assert "super(ModelNew, self).__init__()" in source
    assert "class ModelBlock(nn.Module)" in source  # another name that starts with Model stays
    assert "class Model(" not in source


def test_a_file_without_a_model_class_is_refused():
    with pytest.raises(ValueError, match="class Model"):
        identity_source("import torch\n")


def test_the_set_pairs_with_every_problem_of_a_tree(tmp_path):
    root = make_kernelbench_tree(tmp_path / "kb")
    problems = load_tree(root)
    written = write_identity_set(problems, tmp_path / "identity")
    assert len(written) == len(problems) == 3
    pairing = pair_solutions(problems, tmp_path / "identity")
    assert not pairing.unmatched
    assert sorted((pair.problem, pair.candidate) for pair in pairing.pairs) == sorted(
        (problem.path, tmp_path / "identity" / f"level_{problem.level}_problem_{problem.problem_id}_sample_0_kernel.py")
        for problem in problems)


def test_the_command_selects_levels(tmp_path, capsys):
    root = make_kernelbench_tree(tmp_path / "kb")
    assert main(["--kernelbench", str(root), "--level", "2", "--out", str(tmp_path / "out")]) == 0
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["level_2_problem_1_sample_0_kernel.py"]
    assert "1 identity candidates written" in capsys.readouterr().out


def test_the_calibration_policy_allows_pytorch_without_a_kernel_of_its_own():
    policy = get_policy("calibration")
    assert policy.allow_torch_compute and not policy.require_own_kernel
    assert get_policy("permissive").require_own_kernel


def test_bench_selects_problems_by_id_range(tmp_path):
    """`--problem-id 1-3` once raised NameError (a local name hid the parser of ids)."""
    root = make_kernelbench_tree(tmp_path / "kb")
    write_identity_set(load_tree(root), tmp_path / "identity")
    code = run_cli(["bench", "--kernelbench", str(root), "--candidates", str(tmp_path / "identity"), "--level", "1",
                    "--problem-id", "1-3", "--device", "cpu", "--out", str(tmp_path / "out"), "--no-timing",
                    "--policy", "calibration", "--workers", "1", "--trials", "1"])
    assert code == 0
    results = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(results) == 2  # level 1's problems 1 and 2; level 2 left out
