"""Pairing candidates with problems: KernelBench names, level subdirectories, stems, workspaces."""

from benchmark.kernelbench import load_flat, load_tree
from benchmark.solutions import pair_solutions

from .bench_helpers import make_kernelbench_tree, write_candidate


def test_kernelbench_names_both_forms_and_level_subdirectories(tmp_path):
    problems = load_tree(make_kernelbench_tree(tmp_path / "kb"))
    candidates = tmp_path / "runs"
    write_candidate(candidates / "level_1_problem_1_sample_0_kernel.py", "x.clamp_min(0)")
    write_candidate(candidates / "level_1_problem_1_sample_1.py", "x.abs()")
    write_candidate(candidates / "level_2" / "level_2_problem_1_sample_3_kernel.py", "x")
    write_candidate(candidates / "level_1_problem_9_sample_0_kernel.py", "x")  # no problem 9
    pairing = pair_solutions(problems, candidates)
    assert [(p.problem.name, p.candidate.name, p.sample) for p in pairing.pairs] == [
        ("1_Tiny_relu.py", "level_1_problem_1_sample_0_kernel.py", 0),
        ("1_Tiny_relu.py", "level_1_problem_1_sample_1.py", 1),
        ("1_Tiny_relu_add.py", "level_2_problem_1_sample_3_kernel.py", 3),
    ]
    assert [p.name for p in pairing.unmatched] == ["level_1_problem_9_sample_0_kernel.py"]


def test_stem_names_workspaces_and_level_dirs_disambiguate(tmp_path):
    problems = load_tree(make_kernelbench_tree(tmp_path / "kb"))
    candidates = tmp_path / "cands"
    write_candidate(candidates / "2_Tiny_scale.py", "x * 2")
    write_candidate(candidates / "2_Tiny_scale_sample_4.py", "x + x")
    workspace = candidates / "1_Tiny_relu_add_sample_1"
    write_candidate(workspace / "model_new.py", "x")
    (workspace / "kernels").mkdir()
    pairing = pair_solutions(problems, candidates)
    assert [(p.problem.name, p.candidate.name, p.sample) for p in pairing.pairs] == [
        ("2_Tiny_scale.py", "2_Tiny_scale.py", 0),
        ("2_Tiny_scale.py", "2_Tiny_scale_sample_4.py", 4),
        ("1_Tiny_relu_add.py", "1_Tiny_relu_add_sample_1", 1),
    ]
    assert pairing.unmatched == []


def test_same_stem_in_two_levels_pairs_by_level_directory(tmp_path):
    for level in ("1", "2"):
        write_candidate(tmp_path / "kb" / f"level{level}" / "1_Same.py", "x").write_text(
            "class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")
    problems = load_tree(tmp_path / "kb")
    write_candidate(tmp_path / "cands" / "level2" / "1_Same.py", "x")
    write_candidate(tmp_path / "cands" / "1_Same.py", "x")  # ambiguous without a level directory
    pairing = pair_solutions(problems, tmp_path / "cands")
    assert [(p.problem.parent.name, p.candidate.relative_to(tmp_path / "cands").as_posix())
            for p in pairing.pairs] == [("level2", "level2/1_Same.py")]
    assert [p.name for p in pairing.unmatched] == ["1_Same.py"]


def test_bundled_examples_pair_with_cpu_candidates():
    from benchmark.kernelbench import EXAMPLES_PROBLEMS

    pairing = pair_solutions(load_flat(EXAMPLES_PROBLEMS), EXAMPLES_PROBLEMS.parent / "candidates" / "cpu")
    assert {p.problem.stem for p in pairing.pairs} == {p.stem for p in EXAMPLES_PROBLEMS.glob("*.py")}
    assert all(p.problem.stem == p.candidate.stem for p in pairing.pairs)
