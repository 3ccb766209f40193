"""The pytest plugin, driven through pytester in a subprocess (as a user runs it)."""

import json
import shutil

import pytest

from tests.helpers import CPU_CANDIDATES, TEST_CANDIDATES, TEST_PROBLEMS

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"
FAST = ["--cudaagent-device", "cpu", "--cudaagent-no-timing", "--cudaagent-trials", "2", "-p", "no:cacheprovider"]


@pytest.fixture
def pair_dirs(pytester):
    problems, candidates = pytester.mkdir("problems"), pytester.mkdir("candidates")
    shutil.copy(SMALL_LEAKY, problems / "small_leaky_relu.py")
    shutil.copy(CPU_CANDIDATES / "leaky_relu.py", candidates / "small_leaky_relu.py")
    shutil.copy(TEST_CANDIDATES / "wrong_shape.py", candidates / "small_leaky_relu_sample_1.py")
    return problems, candidates


@pytest.mark.slow
def test_single_pair_passes_and_writes_jsonl(pytester):
    results = pytester.path / "results.jsonl"
    outcome = pytester.runpytest_subprocess(
        "--cudaagent-problem", str(SMALL_LEAKY), "--cudaagent-candidate", str(CPU_CANDIDATES / "leaky_relu.py"),
        "--cudaagent-results", str(results), *FAST)
    outcome.assert_outcomes(passed=1)
    outcome.stdout.fnmatch_lines(["*cudaagent results*", "*PASSED*reward=1*"])
    lines = results.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["status"] == "passed"


@pytest.mark.slow
def test_directory_mode_pairs_by_name_reports_failures_and_resumes(pytester, pair_dirs):
    problems, candidates = pair_dirs
    results = pytester.path / "results.jsonl"
    args = ["--cudaagent-problems", str(problems), "--cudaagent-candidates", str(candidates),
            "--cudaagent-results", str(results), *FAST]
    outcome = pytester.runpytest_subprocess(*args)
    outcome.assert_outcomes(passed=1, failed=1)
    outcome.stdout.fnmatch_lines(["*INCORRECT*", "*shape (3,), expected (256, 512)*"])
    assert len(results.read_text().splitlines()) == 2
    resumed = pytester.runpytest_subprocess(*args, "--cudaagent-resume")
    assert resumed.ret == pytest.ExitCode.NO_TESTS_COLLECTED  # both pairs already done
    assert len(results.read_text().splitlines()) == 2


@pytest.mark.slow
@pytest.mark.parametrize("ahead", [True, False])
def test_start_ahead_builds_the_next_pair_while_the_current_one_is_checked(pytester, pair_dirs, ahead):
    """--cudaagent-start-ahead: the process's next pair (pytest's nextitem) starts its worker once
    the current candidate has built; its Result says how long before its evaluation."""
    problems, candidates = pair_dirs
    results = pytester.path / "results.jsonl"
    args = ["--cudaagent-problems", str(problems), "--cudaagent-candidates", str(candidates),
            "--cudaagent-results", str(results), "--cudaagent-policy", "permissive", *FAST]
    outcome = pytester.runpytest_subprocess(*args, *(["--cudaagent-start-ahead"] if ahead else []))
    outcome.assert_outcomes(passed=1, failed=1)  # the same verdicts either way
    first, second = (json.loads(line) for line in results.read_text().splitlines())
    assert "started_ahead_s" not in first["env"]
    assert ("started_ahead_s" in second["env"]) == ahead
    assert second["status"] == "incorrect"


def test_fixture_verifies_from_a_hand_written_test(pytester):
    pytester.makepyfile(f"""
        def test_wrong_shape_is_caught(cudaagent):
            result = cudaagent.verify(r"{SMALL_LEAKY}", r"{TEST_CANDIDATES / 'wrong_shape.py'}")
            assert result.status == "incorrect"
            assert result.reward == -1
    """)
    pytester.runpytest_subprocess(*FAST).assert_outcomes(passed=1)


def test_options_have_ini_twins(pytester):
    pytester.makeini("[pytest]\ncudaagent_device = cpu\ncudaagent_no_timing = true\ncudaagent_trials = 1\n"
                     "cudaagent_backend = strict-fp32\ncudaagent_fast_build = true\n")
    pytester.makepyfile("""
        def test_ini(cudaagent):
            assert cudaagent.config.device == "cpu" and cudaagent.config.fast_build
            assert cudaagent.config.trials == 1 and not cudaagent.config.timing
            assert cudaagent.config.backend == "strict-fp32"
    """)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_config_file_sets_what_has_no_option_and_the_options_still_win(pytester, monkeypatch):
    from pytest_cudaagent import EvalConfig

    config = pytester.path / "eval_config.json"
    config.write_text(json.dumps(EvalConfig(trials=9, build_timeout_s=7.0, run_timeout_s=3.0).to_dict()))
    pytester.makepyfile("""
        import os

        def test_config(cudaagent):
            assert (cudaagent.config.build_timeout_s, cudaagent.config.run_timeout_s) == (7.0, 3.0)
            assert cudaagent.config.trials == 2 and cudaagent.config.device == "cpu"
            assert cudaagent.config.fast_build is (os.environ["EXPECT_FAST_BUILD"] == "1")
    """)
    monkeypatch.setenv("EXPECT_FAST_BUILD", "0")
    pytester.runpytest_subprocess("--cudaagent-config", str(config), *FAST).assert_outcomes(passed=1)
    monkeypatch.setenv("EXPECT_FAST_BUILD", "1")
    pytester.runpytest_subprocess("--cudaagent-config", str(config), "--cudaagent-fast-build", *FAST).assert_outcomes(passed=1)
    config.write_text(json.dumps(EvalConfig(trials=9, build_timeout_s=7.0, run_timeout_s=3.0, fast_build=True).to_dict()))
    pytester.runpytest_subprocess("--cudaagent-config", str(config), *FAST).assert_outcomes(passed=1)
    missing = pytester.runpytest_subprocess("--cudaagent-config", "nowhere.json", *FAST)
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--cudaagent-config nowhere.json: no such file*"])


def test_the_reference_batch_option_reaches_the_config(pytester, monkeypatch):
    pytester.makepyfile("""
        import os

        def test_batch(cudaagent):
            assert cudaagent.config.reference_batch == os.environ["EXPECT_BATCH"]
    """)
    monkeypatch.setenv("EXPECT_BATCH", "run-7")
    pytester.runpytest_subprocess("--cudaagent-reference-batch", "run-7", *FAST).assert_outcomes(passed=1)
    monkeypatch.setenv("EXPECT_BATCH", "")
    pytester.runpytest_subprocess(*FAST).assert_outcomes(passed=1)


def test_half_a_pair_of_options_is_a_usage_error(pytester):
    outcome = pytester.runpytest_subprocess("--cudaagent-problem", str(SMALL_LEAKY))
    assert outcome.ret == pytest.ExitCode.USAGE_ERROR
    outcome.stderr.fnmatch_lines(["*--cudaagent-problem and --cudaagent-candidate go together*"])


def test_a_candidate_run_without_test_paths_leaves_the_folders_tests_out(pytester):
    pytester.makepyfile(test_unrelated="def test_unrelated():\n    assert False\n")
    pair = ["--cudaagent-problem", str(SMALL_LEAKY), "--cudaagent-candidate", str(TEST_CANDIDATES / "wrong_shape.py")]
    # No paths: only the candidate is evaluated (it fails: wrong shape); the folder's test is deselected.
    pytester.runpytest_subprocess(*pair, *FAST).assert_outcomes(failed=1, deselected=1)
    # Paths named on the command line are collected as usual, next to the candidate.
    pytester.runpytest_subprocess("test_unrelated.py", *pair, *FAST).assert_outcomes(failed=2)


# Injects an error of ours into the evaluating process for one pair (the select() error of #38).
INTERNAL_ERROR_CONFTEST = '''
import pytest_cudaagent.evaluation as evaluation

_run = evaluation.Evaluation.run


def run(self):
    if self.candidate.path.name.endswith("_sample_2.py"):
        raise ValueError("filedescriptor out of range in select() (injected)")
    return _run(self)


evaluation.Evaluation.run = run
'''


def _rows(results) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["candidate"].rsplit("/", 1)[-1], []).append(row)
    return rows


@pytest.mark.slow
def test_every_pair_leaves_one_row_whoever_is_at_fault_and_resume_redoes_only_ours(pytester):
    """A candidate that does not parse (the candidate's), a reference that fails (the
    problem's), an error of ours: one row each, the leaderboard's denominators count them, and
    --cudaagent-resume evaluates only our error again."""
    problems, candidates = pytester.mkdir("problems"), pytester.mkdir("candidates")
    shutil.copy(SMALL_LEAKY, problems / "small_leaky_relu.py")
    shutil.copy(TEST_PROBLEMS / "broken_reference.py", problems / "broken_reference.py")
    shutil.copy(CPU_CANDIDATES / "leaky_relu.py", candidates / "small_leaky_relu.py")
    shutil.copy(TEST_CANDIDATES / "syntax_error.py", candidates / "small_leaky_relu_sample_1.py")
    shutil.copy(CPU_CANDIDATES / "leaky_relu.py", candidates / "small_leaky_relu_sample_2.py")
    shutil.copy(TEST_CANDIDATES / "raises.py", candidates / "broken_reference.py")
    conftest = pytester.makeconftest(INTERNAL_ERROR_CONFTEST)
    results = pytester.path / "results.jsonl"
    args = ["--cudaagent-problems", str(problems), "--cudaagent-candidates", str(candidates),
            "--cudaagent-results", str(results), "--cudaagent-policy", "permissive", *FAST]
    outcome = pytester.runpytest_subprocess(*args)
    outcome.assert_outcomes(passed=1, failed=3)
    rows = _rows(results)
    assert {name: [row["status"] for row in found] for name, found in rows.items()} == {
        "small_leaky_relu.py": ["passed"], "small_leaky_relu_sample_1.py": ["build_error"],
        "small_leaky_relu_sample_2.py": ["harness_error"], "broken_reference.py": ["problem_error"]}
    assert "syntax error on line" in rows["small_leaky_relu_sample_1.py"][0]["error"]
    assert "this reference is broken on purpose" in rows["broken_reference.py"][0]["error"]
    harness = rows["small_leaky_relu_sample_2.py"][0]
    assert "internal error of the evaluator: ValueError: filedescriptor out of range" in harness["error"]
    assert "Traceback" in harness["log"]
    outcome.stdout.fnmatch_lines(["*HARNESS_ERROR*", "*the evaluator's traceback*"])
    conftest.unlink()  # our error fixed: the resume evaluates that pair again, and only it
    resumed = pytester.runpytest_subprocess(*args, "--cudaagent-resume")
    resumed.assert_outcomes(passed=1)
    assert [row["status"] for row in _rows(results)["small_leaky_relu_sample_2.py"]] == ["harness_error", "passed"]


# The pytest worker running one pair dies in the middle of it, as a crashed xdist worker does.
DYING_WORKER_CONFTEST = '''
import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    pair = getattr(item, "pair", None)
    if pair is not None and pair.candidate.name.endswith("_sample_1.py"):
        os._exit(3)
'''


@pytest.mark.slow
def test_a_pair_whose_pytest_worker_died_gets_a_row_of_ours(pytester, pair_dirs):
    problems, candidates = pair_dirs
    pytester.makeconftest(DYING_WORKER_CONFTEST)
    results = pytester.path / "results.jsonl"
    outcome = pytester.runpytest_subprocess(
        "--cudaagent-problems", str(problems), "--cudaagent-candidates", str(candidates),
        "--cudaagent-results", str(results), "-n", "2", *FAST)
    outcome.assert_outcomes(passed=1, failed=1)
    rows = _rows(results)
    assert [row["status"] for row in rows["small_leaky_relu.py"]] == ["passed"]
    died = rows["small_leaky_relu_sample_1.py"]
    assert [row["status"] for row in died] == ["harness_error"]
    assert "the pytest worker evaluating it ended" in died[0]["error"]
