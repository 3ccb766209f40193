"""experiments/published_styles.py: CUDA candidates in published solutions' styles for a
KernelBench tree (their builds run on the GPU machine: the side by side of issue 21)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from experiments import published_styles
from experiments.published_styles import (
    STYLES,
    candidate_source,
    choose,
    model_source,
    set_mib,
    write_pairs,
)

PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch_size = {batch}
features = 64

def get_inputs():
    return [torch.randn(batch_size, features)]

def get_init_inputs():
    return [features]
'''

ARGMAX = PROBLEM.replace("return torch.relu(self.linear(x))", "return torch.argmax(self.linear(x), dim=1)")


def kernelbench_tree(root: Path, per_level: int = 6) -> Path:
    """levelN/<number>_Name.py problems, one per level too large for a set and one whose output is
    an integer tensor (neither may be chosen)."""
    for level in (1, 2, 3):
        folder = root / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True)
        for number in range(1, per_level + 1):
            (folder / f"{number}_Linear{number}.py").write_text(PROBLEM.format(batch=16 * number))
        (folder / f"{per_level + 1}_Huge.py").write_text(PROBLEM.format(batch=4_000_000))
        (folder / f"{per_level + 2}_Argmax.py").write_text(ARGMAX.format(batch=16))
    return root


def test_a_set_is_sized_on_the_meta_device_and_only_one_float32_output_is_taken(tmp_path):
    kernelbench_tree(tmp_path)
    level1 = tmp_path / "KernelBench" / "level1"
    assert set_mib(level1 / "1_Linear1.py") == pytest.approx(2 * 16 * 64 * 4 / 2**20)
    assert set_mib(level1 / "7_Huge.py") > 256
    assert set_mib(level1 / "8_Argmax.py") is None


def test_the_model_is_kept_and_the_input_functions_dropped():
    kept = model_source(PROBLEM.format(batch=16))
    assert "class Model" in kept and "batch_size = 16" in kept
    assert "get_inputs" not in kept and "get_init_inputs" not in kept


def test_choose_spreads_the_levels_skips_what_does_not_fit_and_marks_wrong_and_broken(tmp_path, monkeypatch):
    monkeypatch.setattr(published_styles, "BROKEN", (3,))
    monkeypatch.setattr(published_styles, "WRONG_EVERY", 4)
    pairs = choose(kernelbench_tree(tmp_path), count=12, max_set_mib=256)
    stems = [pair.stem for pair in pairs]
    assert len(pairs) == 12 and len(set(stems)) == 12
    assert not any("Huge" in stem or "Argmax" in stem for stem in stems)
    # of 72: level 1 up to 26 and level 3 16, scaled to 12 -> 4 and 3 (of 6 fitting); level 2 the rest
    assert [stem.split("_")[0] for stem in stems] == ["level1"] * 4 + ["level2"] * 5 + ["level3"] * 3
    assert [pair.wrong for pair in pairs] == [number % 4 == 0 for number in range(1, 13)]
    assert [pair.broken for pair in pairs] == [number == 3 for number in range(1, 13)]
    assert {pair.style for pair in pairs} == set(STYLES)


@pytest.mark.parametrize("style", STYLES)
def test_each_style_is_a_load_inline_candidate_with_its_own_extension(tmp_path, style):
    problem = tmp_path / "1_Linear.py"
    problem.write_text(PROBLEM.format(batch=16))
    pair = published_styles.StyledPair("level1_1_Linear", problem, style, wrong=False, broken=False)
    sources = {index: candidate_source(pair, index) for index in (1, 2)}
    for index, source in sources.items():
        tree = ast.parse(source)
        classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
        assert {"Model", "ModelNew"} <= set(classes) and classes["ModelNew"].bases[0].id == "Model"
        assert f'name="styled_level1_1_Linear_{index}"' in source and "functions=[\"epilogue_cuda\"]" in source
        assert "#include <torch/extension.h>" in source and "1.0" in source  # x * 1 (+ 0): exact
        assert "undeclared_offset" not in source and "1.5" not in source
    assert sources[1] != sources[2]
    wrong = candidate_source(published_styles.StyledPair("w", problem, style, wrong=True, broken=False), 1)
    broken = candidate_source(published_styles.StyledPair("b", problem, style, wrong=False, broken=True), 1)
    assert "1.5" in wrong and "wrong on purpose" in wrong
    assert "undeclared_offset" in broken and "does not compile" in broken


def test_write_pairs_writes_problems_and_candidates_of_the_same_names(tmp_path):
    pairs = write_pairs(kernelbench_tree(tmp_path / "kb"), tmp_path / "out", count=6)
    problems = sorted(p.name for p in (tmp_path / "out" / "problems").glob("*.py"))
    candidates = sorted(p.name for p in (tmp_path / "out" / "candidates").glob("*.py"))
    assert problems == candidates == sorted(f"{pair.stem}.py" for pair in pairs)
    first = pairs[0]
    assert (tmp_path / "out" / "problems" / f"{first.stem}.py").read_text() == first.problem_source.read_text()


def test_the_command_says_what_to_pass_without_a_checkout(tmp_path, capsys):
    assert published_styles.main(["--kernelbench", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "--kernelbench" in capsys.readouterr().err


def test_two_in_three_candidates_write_their_binding_in_the_cu_as_published_sets_do(tmp_path):
    pairs = choose(kernelbench_tree(tmp_path), count=12, max_set_mib=256)
    with_binding = [pair for pair in pairs if pair.binding]
    assert len(with_binding) == 8  # all but every third of 12
    for index, pair in enumerate(pairs, start=1):
        text = candidate_source(pair, index)
        assert ("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in text) == pair.binding
        assert ("functions=None" in text) == pair.binding and ('functions=["epilogue_cuda"]' in text) != pair.binding
        ast.parse(text)
