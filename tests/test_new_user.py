"""A new user's first hour: `cudaagent` without the train extra, and every command run from
another directory with paths relative to it (the way anyone types them next to a KernelBench
clone), messages naming those paths as typed."""

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import CPU_CANDIDATES, TEST_PROBLEMS

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"
TRAIN_EXTRA = "cudaagent train needs the train extra: pip install 'cuda-agent[train]'"
COMMANDS = ("verify", "bench", "leaderboard", "baselines", "synth", "solve", "train")
# `cudaagent` with the train extra's packages unimportable (None in sys.modules makes `import`
# fail), reporting on stderr which of the other packages the command loaded.
WITHOUT_TRAIN_EXTRA = textwrap.dedent("""
    import sys
    for name in ("accelerate", "transformers"):
        sys.modules[name] = None
    from pytest_cudaagent.cli import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as stop:
        code = stop.code
    loaded = sorted({module.split(".")[0] for module in sys.modules} & {"benchmark", "policy", "synthesis"})
    print("LOADED", ",".join(loaded), file=sys.stderr)
    sys.exit(code)
""")


def base_install(*args, cwd=None):
    return subprocess.run([sys.executable, "-c", WITHOUT_TRAIN_EXTRA, *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def cudaagent(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pytest_cudaagent.cli", *args], capture_output=True, text=True,
                          timeout=900, cwd=cwd)


def loaded(run) -> str:
    return next(line for line in run.stderr.splitlines() if line.startswith("LOADED")).removeprefix("LOADED ")


def errors(run) -> list[str]:
    return [line for line in run.stderr.splitlines() if not line.startswith("LOADED")]


@pytest.fixture
def workdir(tmp_path):
    """A user's folder: a problem and its candidate under relative names."""
    (tmp_path / "probs").mkdir()
    (tmp_path / "cands").mkdir()
    shutil.copy(SMALL_LEAKY, tmp_path / "probs" / "leaky.py")
    shutil.copy(CPU_CANDIDATES / "leaky_relu.py", tmp_path / "cands" / "leaky.py")
    return tmp_path


# -- the base install ----------------------------------------------------------------------------


def test_verify_help_loads_no_other_package_and_needs_no_train_extra():
    run = base_install("verify", "--help")
    assert run.returncode == 0, run.stderr
    assert "--no-timing" in run.stdout
    assert loaded(run) == ""


def test_top_level_help_lists_every_command_without_the_train_extra():
    run = base_install("--help")
    assert run.returncode == 0, run.stderr
    listed = run.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert tuple(listed) == COMMANDS


def test_train_help_needs_no_train_extra():
    run = base_install("train", "--help")
    assert run.returncode == 0, run.stderr
    assert "ppo-single-turn" in run.stdout and loaded(run) == "policy"


def test_train_without_the_extra_says_which_extra_in_one_line():
    run = base_install("train", "--config", "x.yaml")
    assert run.returncode == 2
    assert errors(run) == [TRAIN_EXTRA]


def test_solve_with_the_transformers_engine_without_the_extra_says_which_extra():
    run = base_install("solve", "probs", "--engine", "transformers", "--model", "m", "--out", "o")
    assert run.returncode == 2
    assert errors(run) == ["cudaagent solve --engine transformers needs the train extra: "
                           "pip install 'cuda-agent[train]'"]


def test_synth_crawl_without_transformers_crawls_the_rest_with_a_note(tmp_path):
    run = base_install("synth", "crawl", "--out", "cat/catalogue.json", "--sources", "torch.special,transformers",
                       "--filter", r"^torch\.special\.(erf|expit)$", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    catalogue = json.loads((tmp_path / "cat" / "catalogue.json").read_text())
    assert {op["name"] for op in catalogue["operators"]} == {"torch.special.erf", "torch.special.expit"}
    log = (tmp_path / "cat" / "crawl_log.csv").read_text()
    assert "not installed" in log and "cuda-agent[train]" in log
    assert "catalogue: cat/catalogue.json" in run.stderr  # the path as typed


# -- relative paths, from the user's folder -------------------------------------------------------


@pytest.mark.slow
def test_verify_takes_paths_relative_to_the_callers_folder(workdir):
    run = cudaagent("verify", "probs/leaky.py", "cands/leaky.py", "--device", "cpu", "--no-timing",
                    "--output", "out/result.json", cwd=workdir)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads((workdir / "out" / "result.json").read_text())
    assert result["status"] == "passed" and result["problem"] == str(workdir / "probs" / "leaky.py")


def test_messages_name_paths_as_typed(workdir):
    cases = [
        (("verify", "probs/missing.py", "cands/leaky.py", "--device", "cpu"), "probs/missing.py: no such problem file"),
        (("bench", "--kernelbench", "KB", "--candidates", "cands", "--device", "cpu"),
         "KB: no such KernelBench clone"),
        (("bench", "--problems", "probs", "--candidates", "nothing", "--device", "cpu"),
         "nothing: no such candidates directory"),
        (("leaderboard", "runs/results.jsonl"), "runs/results.jsonl: no such results file"),
        (("baselines", "--problems", "probs", "--compare", "theirs.json", "--device", "cpu"),
         "theirs.json: no such baseline file"),
        (("synth", "check", "probs/missing.py", "--device", "cpu"), "probs/missing.py: no such problem file"),
        (("solve", "missing", "--engine", "scripted", "--model", "x", "--out", "o", "--device", "cpu"),
         "missing: no such problem file or directory"),
        (("train", "--config", "configs/missing.yaml"), "no training config at configs/missing.yaml"),
    ]
    for argv, message in cases:
        run = cudaagent(*argv, cwd=workdir)
        assert run.returncode == 2, (argv, run.stdout, run.stderr)
        text = " ".join((run.stdout + run.stderr).split())  # rich may wrap lines
        assert message in text, (argv, text)
        assert str(workdir) not in text, (argv, text)


@pytest.mark.slow
def test_bench_and_leaderboard_from_a_kernelbench_tree_with_relative_paths(workdir):
    """The issue's command: relative --kernelbench, --candidates and --out, while the batch's
    pytest runs in OUT/.bench-run."""
    level1 = workdir / "KernelBench" / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    shutil.copy(SMALL_LEAKY, level1 / "1_SmallLeakyReLU.py")
    shutil.copy(CPU_CANDIDATES / "leaky_relu.py", workdir / "cands" / "level_1_problem_1_sample_0_kernel.py")
    run = cudaagent("bench", "--kernelbench", "KernelBench", "--level", "1", "--candidates", "cands",
                    "--device", "cpu", "--out", "out", "--no-timing", "--trials", "1", "--workers", "1", cwd=workdir)
    assert run.returncode == 0, run.stdout + run.stderr
    results = [json.loads(line) for line in (workdir / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in results] == ["passed"]
    assert "candidates from cands" in run.stdout and "out/leaderboard.md" in run.stdout
    board = cudaagent("leaderboard", "out/results.jsonl", "--out", "board", cwd=workdir)
    assert board.returncode == 0, board.stderr
    assert "| level1 |" in (workdir / "board" / "leaderboard.md").read_text()


@pytest.mark.slow
def test_baselines_take_relative_paths(workdir):
    run = cudaagent("baselines", "--problems", "probs", "--modes", "eager", "--device", "cpu",
                    "--out", "base/baselines.json", cwd=workdir)
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads((workdir / "base" / "baselines.json").read_text())
    assert "leaky.py" in json.dumps(record["eager"])
    assert "wrote base/baselines.json" in run.stdout


@pytest.mark.slow
def test_pytest_options_resolve_against_the_folder_pytest_started_in(workdir):
    """A conftest that changes directory before the items run: the paths were resolved at
    configure time, so the run still finds them and writes the results where asked."""
    (workdir / "conftest.py").write_text(textwrap.dedent("""
        import os
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_collection_finish(session):
            os.chdir("/")
    """))
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                          "--cudaagent-problem", "probs/leaky.py", "--cudaagent-candidate", "cands/leaky.py",
                          "--cudaagent-device", "cpu", "--cudaagent-no-timing", "--cudaagent-trials", "1",
                          "--cudaagent-results", "out/results.jsonl"],
                         capture_output=True, text=True, timeout=900, cwd=workdir)
    assert run.returncode == 0, run.stdout + run.stderr
    (result,) = [json.loads(line) for line in (workdir / "out" / "results.jsonl").read_text().splitlines()]
    assert result["status"] == "passed"


def test_the_license_is_an_spdx_string_not_a_table():
    # pip warns that project.license as a TOML table stops building after 2027-02-18 (#45).
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
