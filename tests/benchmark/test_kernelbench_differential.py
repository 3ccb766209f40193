"""The differential script's own logic on the CPU: verdict mapping, tallies, tables, JSON, how it
finds KernelBench's eval in a checkout, and its refusal without a GPU. KernelBench itself runs
only on a GPU machine (see the script's docstring)."""

import json
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from experiments import kernelbench_differential as differential
from experiments.kernelbench_differential import (
    CATEGORIES,
    PairVerdict,
    agreement,
    category,
    kb_outcome,
    our_outcome,
    tally,
)


def verdict(name: str, ours_status: str, kb: str, rule: str | None = None) -> PairVerdict:
    return PairVerdict(name, "p.py", f"{name}.py", our_outcome(ours_status), kb, ours_status, rule,
                       f"our detail {name}", f"kb detail {name}")


FAKE = [
    verdict("a", "passed", "correct"),
    verdict("b", "passed", "correct"),
    verdict("c", "incorrect", "incorrect"),
    verdict("d", "build_error", "error"),
    verdict("e", "passed", "incorrect"),
    verdict("f", "passed", "error"),
    verdict("g", "incorrect", "correct"),
    verdict("h", "violation", "correct", rule="timed_output"),
    verdict("i", "problem_error", "correct"),
    verdict("j", "nondeterministic_reference", "incorrect"),
]


def render(table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def test_our_statuses_map_to_outcomes():
    assert [our_outcome(s) for s in ("passed", "incorrect", "nondeterministic_reference", "violation")] == \
        ["correct", "incorrect", "incorrect", "violation"]
    assert {our_outcome(s) for s in ("build_error", "runtime_error", "crashed", "timeout", "problem_error")} == {"error"}


def test_kernelbench_results_map_to_outcomes():
    assert kb_outcome({"compiled": True, "correctness": True, "metadata": {"correctness_trials": "(5 / 5)"}}) == \
        ("correct", "(5 / 5)")
    assert kb_outcome({"compiled": True, "correctness": False, "metadata": {"correctness_issue": "Output mismatch"}}) \
        == ("incorrect", "Output mismatch")
    assert kb_outcome({"compiled": True, "correctness": False, "metadata": {"runtime_error": "boom"}})[0] == "error"
    assert kb_outcome({"compiled": False, "correctness": False, "metadata": {}})[0] == "error"
    assert kb_outcome({"child_error": "the process died (exit code -11)"}) == \
        ("error", "the process died (exit code -11)")
    assert kb_outcome(None)[0] == "error"


def test_every_pair_of_outcomes_has_one_category():
    for ours in ("correct", "incorrect", "violation", "error"):
        for kb in ("correct", "incorrect", "error"):
            assert category(ours, kb) in CATEGORIES


def test_tally_and_agreement():
    counts = tally(FAKE)
    assert list(counts) == list(CATEGORIES) and sum(counts.values()) == len(FAKE)
    assert counts == {
        "both correct": 2, "both incorrect (or error)": 3, "we correct, KB incorrect": 1, "we correct, KB error": 1,
        "we incorrect, KB correct": 1, "we flag a violation, KB correct": 1, "we error, KB correct": 1}
    assert agreement(FAKE) == pytest.approx(0.5)
    assert agreement([]) is None


def test_tables_show_counts_and_each_pair():
    summary = render(differential.summary_table(FAKE, "v0.1"))
    assert "KernelBench v0.1" in summary and "agreement on correctness: 50.0% of 10" in summary
    assert "we flag a violation, KB correct" in summary
    rows = render(differential.pairs_table(FAKE))
    assert "violation / timed_output" in rows and "our detail h" in rows and "kb detail a" in rows


def test_json_report_round_trips(tmp_path):
    path = tmp_path / "differential.json"
    path.write_text(json.dumps(differential.report(FAKE, {"release": "main"}), indent=1))
    data = json.loads(path.read_text())
    assert data["counts"]["both correct"] == 2 and data["agreement"] == pytest.approx(0.5)
    assert data["pairs"][7]["category"] == "we flag a violation, KB correct" and data["pairs"][7]["our_rule"] == "timed_output"


FAKE_EVAL = """
def get_tolerance_for_precision(precision):
    return {"fp32": 1e-4, "fp16": 1e-2}[precision]

def eval_kernel_against_ref(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                            num_perf_trials=10, measure_performance=False, verbose=False, build_dir=None):
    return None
"""


@pytest.mark.parametrize("layout", ["src/kernelbench/eval.py", "src/eval.py"])
def test_finds_kernelbench_eval_in_either_layout(tmp_path, monkeypatch, layout):
    module_file = tmp_path / layout
    module_file.parent.mkdir(parents=True)
    module_file.write_text(textwrap.dedent(FAKE_EVAL))
    (module_file.parent / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("kernelbench", "kernelbench.eval", "src", "src.eval"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = differential.import_kernelbench_eval(tmp_path)
    assert Path(module.__file__) == module_file
    arguments = differential.kernelbench_call_arguments(module.eval_kernel_against_ref, "/tmp/build")
    assert arguments == {"seed_num": 42, "num_correct_trials": 5, "measure_performance": False, "verbose": False,
                         "build_dir": "/tmp/build"}
    differential.pin_release_tolerance(module, "v0.1")
    assert module.get_tolerance_for_precision("fp32") == 1e-2 and module.get_tolerance_for_precision("fp16") == 1e-2


def test_main_release_needs_a_checkout_that_has_the_tolerance_function():
    class OldEval:  # v0.1 era: 1e-2 written into run_and_check_correctness
        pass

    differential.pin_release_tolerance(OldEval, "v0.1")
    with pytest.raises(ValueError, match="--release v0.1"):
        differential.pin_release_tolerance(OldEval, "main")


def test_not_a_checkout_says_what_to_give(tmp_path):
    with pytest.raises(FileNotFoundError, match="KernelBench checkout"):
        differential.import_kernelbench_eval(tmp_path)


def test_default_pairs_cover_the_compat_suite_and_the_adversarial_corpus(tmp_path):
    args = differential.build_parser().parse_args(["--kernelbench", str(tmp_path)])
    names = [name for name, _ in differential.collect_pairs(args)]
    assert "folded_scale" in names and "batchnorm_sample_1" in names and "candidates/timing_pointer_memo" in names
    assert len(names) == len(set(names))


def test_without_a_gpu_it_says_so_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert differential.main(["--kernelbench", str(tmp_path)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().out


def test_missing_llm_clients_are_stubbed_so_the_checkout_imports(monkeypatch):
    """KernelBench's package __init__ imports dotenv, openai and litellm (its LLM helpers); where
    they are missing, stubs stand in: load_dotenv does nothing, a client call raises."""
    import importlib.util
    import sys

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name in differential.LLM_CLIENT_MODULES else real_find_spec(name, *rest))
    for name in differential.LLM_CLIENT_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        assert sorted(differential.stub_missing_llm_clients()) == ["dotenv", "litellm", "openai"]
        assert sys.modules["dotenv"].load_dotenv() is False
        with pytest.raises(RuntimeError, match="not installed"):
            sys.modules["openai"].OpenAI(api_key="x")
        with pytest.raises(RuntimeError, match="not installed"):
            sys.modules["litellm"].completion(model="m")
    finally:
        for name in differential.LLM_CLIENT_MODULES:
            sys.modules.pop(name, None)


def test_a_triton_candidate_is_declared_to_kernelbench_as_triton():
    """Exec'd as backend "cuda", Triton's @jit fails in KernelBench ("@jit functions should be
    defined in a Python file", seen on the H100 for every Triton candidate): the differential
    declares it, where the checkout's eval takes a backend."""

    def eval_with_backend(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                          measure_performance=False, verbose=False, build_dir=None, backend="cuda"):
        return None

    def eval_without_backend(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                             measure_performance=False, verbose=False, build_dir=None):
        return None

    triton_source = "import triton\nimport triton.language as tl\n"
    assert differential.kernelbench_call_arguments(eval_with_backend, "/b", triton_source)["backend"] == "triton"
    assert "backend" not in differential.kernelbench_call_arguments(eval_with_backend, "/b", "import torch\n")
    assert "backend" not in differential.kernelbench_call_arguments(eval_without_backend, "/b", triton_source)
    # speed_fidelity's timed call: its overrides win, and only what the checkout's eval takes is passed.
    timed = differential.kernelbench_call_arguments(eval_with_backend, None, triton_source, measure_performance=True,
                                                    num_perf_trials=100)
    assert timed["measure_performance"] is True and "num_perf_trials" not in timed and timed["backend"] == "triton"


def test_a_cut_short_run_resumes_from_its_progress_file(tmp_path):
    """Pairs judged before (a line per pair) are taken as they are, a line a kill cut in half is
    skipped, and pairs no longer asked for are left out."""
    progress = tmp_path / "differential.pairs.jsonl"
    whole = [json.dumps(differential.asdict(v)) for v in FAKE[:3]]
    progress.write_text("\n".join(whole) + "\n" + whole[0][: len(whole[0]) // 2])
    found = differential.judged_before(progress, {"a", "c", "z"})
    assert sorted(v.name for v in found) == ["a", "c"]
    assert found[[v.name for v in found].index("c")] == FAKE[2]
    assert differential.judged_before(tmp_path / "absent.jsonl", {"a"}) == []
    assert differential.judged_before(None, {"a"}) == []


def readme_difference_rows() -> list[str]:
    """The first cells of the table "Where we differ from KernelBench, and why" (docs/conventions.md)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "conventions.md").read_text()
    section = text.split("## Where we differ from KernelBench, and why", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ")[0].removeprefix("| ") for line in section.splitlines()
            if line.startswith("| ") and " | " in line]
    return [row for row in rows if row not in ("difference", "outcome") and not row.startswith("---")]


def test_every_named_difference_is_a_row_of_the_readme_table():
    rows = readme_difference_rows()
    for named in {differential.CHEAT_ROW, *differential.KNOWN_DIFFERENCES.values()}:
        assert any(row.startswith(named) for row in rows), named


def test_each_disagreement_is_named_by_its_row_or_said_to_have_none():
    assert verdict("a", "passed", "correct").difference is None
    assert verdict("c", "incorrect", "error").difference is None
    assert verdict("h", "violation", "correct", rule="timed_output").difference == differential.CHEAT_ROW
    assert verdict("two_layers", "passed", "incorrect").difference == "parameters drawn in another order"
    assert verdict("g", "incorrect", "correct").difference == "unnamed"
    assert differential.unnamed(FAKE) == ["e", "f", "g", "i"]  # h is a cheat caught by a rule; j agrees
    summary = render(differential.summary_table([verdict("g", "incorrect", "correct")], "v0.1"))
    assert "disagreements without a named row: 1 (g)" in summary
    data = differential.report([verdict("two_layers", "passed", "incorrect")], {})
    assert data["unnamed"] == [] and data["pairs"][0]["difference"] == "parameters drawn in another order"
