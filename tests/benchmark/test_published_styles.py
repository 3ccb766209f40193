"""experiments/published_styles.py: CUDA candidates in published solutions' styles for a
KernelBench tree (their builds run on the GPU machine: the side by side of issue 21)."""

from __future__ import annotations

import ast
import json
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


def test_half_the_candidates_write_their_binding_in_the_cu_a_quarter_declare_it_a_quarter_include_no_torch(tmp_path):
    pairs = choose(kernelbench_tree(tmp_path), count=12, max_set_mib=256)
    assert [pair.binding for pair in pairs] == [number % 4 in (1, 2) for number in range(1, 13)]
    assert [pair.torch_include for pair in pairs] == [number % 4 != 0 for number in range(1, 13)]
    for index, pair in enumerate(pairs, start=1):
        text = candidate_source(pair, index)
        assert ("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in text) == pair.binding
        assert ("functions=None" in text) == pair.binding and ('functions=["epilogue_cuda"]' in text) != pair.binding
        epilogue_source = text[text.index("epilogue_source"):text.index("epilogue_cpp_source")]
        assert ("#include <torch/extension.h>" in epilogue_source) == pair.torch_include
        ast.parse(text)


def test_the_shares_of_72_candidates_are_the_shares_the_set_names():
    """Over 72 numbers each build style comes as often as BUILD_STYLE_SHARES says."""
    numbers = range(1, 73)
    counted = {"binding in the .cu": sum(map(published_styles.binding_in_cu, numbers)),
               "no torch include": sum(not published_styles.torch_include(n) for n in numbers),
               "--use_fast_math": sum(map(published_styles.fast_math, numbers)),
               "a second load_inline": sum(map(published_styles.second_load, numbers)),
               "extra_include_paths": sum(map(published_styles.include_paths, numbers))}
    counted["declared in cpp_sources"] = 72 - counted["binding in the .cu"] - counted["no torch include"]
    for style, share in published_styles.BUILD_STYLE_SHARES.items():
        numerator, denominator = map(int, share.split("/"))
        assert counted[style] == 72 * numerator // denominator, style


def _calls(text: str) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_inline"]


def _keywords(call: ast.Call) -> dict[str, str]:
    return {keyword.arg: ast.unparse(keyword.value) for keyword in call.keywords}


@pytest.mark.parametrize("written", ["fast_math", "second_load", "include_paths", "none"])
def test_each_build_style_is_written_into_the_load_inline_calls_as_published_solutions_write_it(tmp_path, written):
    problem = tmp_path / "1_Linear.py"
    problem.write_text(PROBLEM.format(batch=16))
    flags = {name: name == written for name in ("fast_math", "second_load", "include_paths")}
    pair = published_styles.StyledPair("level1_1_Linear", problem, "declared", wrong=False, broken=False, **flags)
    text = candidate_source(pair, 3)
    calls = _calls(text)
    assert len(calls) == (2 if flags["second_load"] else 1)
    for call in calls:
        keywords = _keywords(call)
        assert (keywords.get("extra_cuda_cflags") == "['-O3', '--use_fast_math']") == flags["fast_math"]
        assert ("extra_include_paths" in keywords) == flags["include_paths"]
    names = [_keywords(call)["name"] for call in calls]
    assert len(set(names)) == len(names)  # each extension its own name: each build cold
    forward = text[text.index("class ModelNew"):]
    assert ("finish.finish_cuda(epilogue.epilogue_cuda(" in forward) == flags["second_load"]
    assert pair.build_styles()[0] == "declared in cpp_sources"
    assert len(pair.build_styles()) == (1 if written == "none" else 2)


def test_write_pairs_keeps_each_candidates_build_styles_and_may_take_one_style_only(tmp_path):
    kernelbench = kernelbench_tree(tmp_path / "kb")
    every = write_pairs(kernelbench, tmp_path / "all", count=12)
    styles = json.loads((tmp_path / "all" / "styles.json").read_text())
    assert styles == {pair.stem: pair.build_styles() for pair in every}
    assert published_styles.style_counts(every)["binding in the .cu"] == 6
    only = write_pairs(kernelbench, tmp_path / "bind", count=12, only="binding in the .cu")
    assert [pair.stem for pair in only] == [pair.stem for pair in every if pair.binding]
    assert sorted(p.stem for p in (tmp_path / "bind" / "candidates").glob("*.py")) == sorted(p.stem for p in only)
    # The numbering (and so every candidate's text) is that of the whole set.
    for pair in only:
        assert ((tmp_path / "bind" / "candidates" / f"{pair.stem}.py").read_text()
                == (tmp_path / "all" / "candidates" / f"{pair.stem}.py").read_text())
