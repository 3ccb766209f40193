import json
import subprocess
import sys

import pytest

from tests.helpers import CPU_CANDIDATES, TEST_CANDIDATES, TEST_PROBLEMS

SMALL_LEAKY = TEST_PROBLEMS / "small_leaky_relu.py"


def cudaagent(*args):
    return subprocess.run([sys.executable, "-m", "pytest_cudaagent.cli", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_verify_passing_candidate_exits_0_and_writes_json(tmp_path):
    output = tmp_path / "result.json"
    run = cudaagent("verify", str(SMALL_LEAKY), str(CPU_CANDIDATES / "leaky_relu.py"), "--device", "cpu",
                    "--trials", "2", "--baselines", "eager", "--output", str(output))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PASSED" in run.stdout and "vs eager" in run.stdout
    result = json.loads(output.read_text())
    assert result["status"] == "passed" and result["timing"]["eager"]["samples"] > 0
    assert result["speedup_vs_compile"] is None and result["speedup_vs_eager"] > 0


def test_verify_failing_candidate_exits_1_and_json_flag_prints_json(tmp_path):
    run = cudaagent("verify", str(SMALL_LEAKY), str(TEST_CANDIDATES / "wrong_shape.py"), "--device", "cpu",
                    "--no-timing", "--json")
    assert run.returncode == 1
    assert json.loads(run.stdout)["status"] == "incorrect"


def test_verify_bad_file_exits_2_with_one_line_error():
    run = cudaagent("verify", str(SMALL_LEAKY), str(TEST_CANDIDATES / "no_model_new.py"), "--device", "cpu")
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "no class ModelNew" in run.stderr


def test_verify_bad_usage_exits_2():
    assert cudaagent("verify", str(SMALL_LEAKY)).returncode == 2
    assert cudaagent("verify", str(SMALL_LEAKY), str(SMALL_LEAKY), "--baselines", "fast").returncode == 2


@pytest.mark.parametrize(("flags", "overlap", "audit"), [
    ([], True, False), (["--count-launch"], False, False), (["--audit-timed-calls"], True, True)])
def test_verify_timing_flags_reach_the_timing_config(monkeypatch, flags, overlap, audit):
    from pytest_cudaagent import cli
    from pytest_cudaagent.core.result import Result

    seen = {}

    def fake_evaluate(problem, candidate, config):
        seen["timing"] = config.timing_config
        return Result(problem=str(problem), candidate=str(candidate), status="incorrect")

    monkeypatch.setattr(cli, "evaluate", fake_evaluate)
    assert cli.main(["verify", str(SMALL_LEAKY), str(CPU_CANDIDATES / "leaky_relu.py"), "--json", *flags]) == 1
    assert seen["timing"].overlap_launch is overlap and seen["timing"].audit_timed_calls is audit


@pytest.mark.parametrize(("flags", "backend"), [([], "pytorch-default"), (["--backend", "strict-fp32"], "strict-fp32")])
def test_verify_backend_flag_reaches_the_config(monkeypatch, flags, backend):
    from pytest_cudaagent import cli
    from pytest_cudaagent.core.result import Result

    seen = {}

    def fake_evaluate(problem, candidate, config):
        seen["backend"] = config.backend
        return Result(problem=str(problem), candidate=str(candidate), status="incorrect")

    monkeypatch.setattr(cli, "evaluate", fake_evaluate)
    assert cli.main(["verify", str(SMALL_LEAKY), str(CPU_CANDIDATES / "leaky_relu.py"), "--json", *flags]) == 1
    assert seen["backend"] == backend


def test_verify_checks_its_files_before_torch_is_imported(tmp_path):
    # A usage error answers at once: the evaluation core (torch) is never loaded for it.
    probe = ("import sys\nfrom pytest_cudaagent.cli import main\n"
             "code = main(['verify', 'no_such_problem.py', 'no_such_candidate.py'])\n"
             "print(code, 'torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert run.stdout.split() == ["2", "False"], run.stdout + run.stderr
    assert "no_such_problem.py: no such problem file" in run.stderr
    missing_candidate = subprocess.run([sys.executable, "-c", probe.replace("'no_such_problem.py'", repr(str(SMALL_LEAKY)))],
                                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert missing_candidate.stdout.split() == ["2", "False"], missing_candidate.stderr
    assert run.returncode == 0


@pytest.mark.parametrize(("flags", "run_s", "build_s"), [
    ([], 300.0, 600.0), (["--timeout", "7"], 7.0, 600.0), (["--timeout", "7", "--build-timeout", "40"], 7.0, 40.0)])
def test_verify_timeout_flags_reach_the_config(monkeypatch, flags, run_s, build_s):
    from pytest_cudaagent import cli
    from pytest_cudaagent.core.result import Result

    seen = {}

    def fake_evaluate(problem, candidate, config):
        seen["timeouts"] = (config.run_timeout_s, config.build_timeout_s)
        return Result(problem=str(problem), candidate=str(candidate), status="incorrect")

    monkeypatch.setattr(cli, "evaluate", fake_evaluate)
    assert cli.main(["verify", str(SMALL_LEAKY), str(CPU_CANDIDATES / "leaky_relu.py"), "--json", *flags]) == 1
    assert seen["timeouts"] == (run_s, build_s)
    assert cli.main(["verify", str(SMALL_LEAKY), str(CPU_CANDIDATES / "leaky_relu.py"), "--timeout", "0"]) == 2


LOOPS_FOREVER = """import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()

    def forward(self, x):
        while True:
            pass
"""


@pytest.mark.slow
def test_a_candidate_that_loops_forever_is_a_timeout_after_the_given_seconds(tmp_path):
    candidate = tmp_path / "loops.py"
    candidate.write_text(LOOPS_FOREVER)
    run = cudaagent("verify", str(SMALL_LEAKY), str(candidate), "--device", "cpu", "--no-timing", "--json",
                    "--timeout", "15")  # long enough for the reference on a loaded box
    assert run.returncode == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "timeout" and "15 s" in result["error"], result["error"]


def test_a_build_error_prints_the_compiler_output_once_and_as_written():
    import io

    from rich.console import Console

    from pytest_cudaagent.cli import render_result
    from pytest_cudaagent.core.result import Result

    compiler = ("FAILED: [code=1] main.o\nmain.cpp:2:15: error: expected primary-expression before 'return'\n"
                "ninja: build stopped: subcommand failed.")
    result = Result("p.py", "c.py", status="build_error", error=f"build failed: RuntimeError: {compiler}",
                    log=f"Traceback (most recent call last):\n  ...\nRuntimeError: {compiler}\n")
    out = io.StringIO()
    render_result(result, Console(file=out, width=60))
    text = out.getvalue()
    assert text.count("expected primary-expression") == 1 and "--- candidate log" not in text
    assert "FAILED: [code=1] main.o" in text  # not eaten as markup
    # A log that says more than the error is still shown.
    crashed = Result("p.py", "c.py", status="crashed", error="worker exited with code 1",
                     log="Fatal Python error: Segmentation fault\n")
    out = io.StringIO()
    render_result(crashed, Console(file=out, width=60))
    assert "--- candidate log" in out.getvalue() and "Segmentation fault" in out.getvalue()
