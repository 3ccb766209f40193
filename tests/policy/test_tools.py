"""The agent's tools on a real workspace: file tools, the confined shell, argument checks, and
the text the model reads for build errors and evaluator Results."""

from pathlib import Path

import pytest

from policy.evaluation_pool import EvaluationPool
from policy.toolcalls import ToolCall
from policy.tools import Toolbox, ToolboxConfig, trim_build_log
from policy.workspace import Workspace
from pytest_cudaagent import EvalConfig, Result, TrialResult, Violation

PROBLEM = Path(__file__).parents[2] / "examples" / "problems" / "leaky_relu.py"


@pytest.fixture
def toolbox(tmp_path):
    workspace = Workspace.create(PROBLEM, tmp_path / "ws", "cpu")
    pool = EvaluationPool("cpu")  # starts no process until something is evaluated
    yield Toolbox(workspace, pool, ToolboxConfig(EvalConfig(device="cpu"), shell_timeout_s=20, output_chars=600))
    pool.close()


def call(toolbox, name, **arguments):
    return toolbox.call(ToolCall(name, arguments))


def test_write_read_and_list(toolbox):
    written = call(toolbox, "write_file", path="kernels/relu.cpp", content="int a;\nint b;\nint c;\n")
    assert written.text.startswith("wrote kernels/relu.cpp (3 lines") and not written.error
    part = call(toolbox, "read_file", path="kernels/relu.cpp", start_line=2, max_lines=1)
    assert part.text == "kernels/relu.cpp (lines 2-2 of 3)\nint b;\n[1 more lines: read_file with start_line=3]"
    listing = call(toolbox, "list_files", path="kernels").text
    assert listing == "kernels/relu.cpp  (21 bytes)"
    assert "binding_registry.h" in call(toolbox, "list_files").text
    missing = call(toolbox, "read_file", path="nope.py")
    assert missing.error and "list_files" in missing.text


def test_cuda_kernel_on_the_cpu_backend_gets_a_note(toolbox):
    assert "kernels/*.cpp" in call(toolbox, "write_file", path="kernels/relu.cu", content="").text


def test_writes_outside_or_to_protected_files_are_refused(toolbox, tmp_path):
    for path in ("model.py", "binding.cpp", "../x.py", str(tmp_path / "y.py"), "kernels"):
        outcome = call(toolbox, "write_file", path=path, content="x")
        assert outcome.error and "refused" in outcome.text, path
    assert not (tmp_path / "x.py").exists() and not (tmp_path / "y.py").exists()
    assert (toolbox.workspace.root / "model.py").read_bytes() == PROBLEM.read_bytes()


def test_bad_calls_explain_themselves(toolbox):
    assert "unknown tool 'delete'" in call(toolbox, "delete").text
    assert "missing argument(s) content" in call(toolbox, "write_file", path="a").text
    assert "unknown argument(s) force" in call(toolbox, "compile", force=True).text
    assert "must be a string" in call(toolbox, "run", command=["ls"]).text
    assert "must be a integer" in call(toolbox, "read_file", path="model.py", start_line="2").text


def test_shell_runs_in_the_workspace_with_a_scrubbed_environment(toolbox, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    outcome = call(toolbox, "run", command="pwd; ls kernels; echo token=$SECRET_TOKEN; exit 3")
    assert str(toolbox.workspace.root) in outcome.text
    assert "token=\n" in outcome.text and "hunter2" not in outcome.text
    assert outcome.text.endswith("[exit code 3]")


def test_shell_refuses_paths_outside_and_kills_on_timeout(toolbox, tmp_path):
    for command in ("cat ../x", "ls /etc", "cp model_new.py ~/x", "echo x > /tmp/out", "cd .. && ls",
                    "python --out=/root/x"):
        outcome = call(toolbox, "run", command=command)
        assert outcome.error and "refused" in outcome.text, command
    assert "cannot parse" in call(toolbox, "run", command="echo 'unclosed").text
    slow = call(toolbox, "run", command="sleep 30 & sleep 30", timeout_s=1)
    assert "killed after the 1 s limit" in slow.text


def test_shell_changes_to_protected_files_are_undone_and_reported(toolbox):
    outcome = call(toolbox, "run", command="chmod u+w binding.cpp model.py; echo '// mine' >> binding.cpp; rm -f model.py")
    assert outcome.error and "binding.cpp" in outcome.text and "model.py" in outcome.text
    assert toolbox.workspace.restore_protected() == []


def test_output_is_cut_keeping_head_and_tail(toolbox):
    text = call(toolbox, "run", command="seq 1 2000").text
    assert len(text) < 700 and "characters left out" in text
    assert text.startswith("$ seq 1 2000\n1\n2\n") and "2000\n[exit code 0]" in text


def test_finish_ends_and_tools_without_model_new_say_what_to_write(toolbox):
    assert call(toolbox, "finish", summary="done").finished
    assert "write it" in call(toolbox, "compile").text
    verify = call(toolbox, "verify")
    assert verify.error and verify.result.reward == -1 and "model_new.py" in verify.text


def test_trim_build_log_keeps_errors_with_their_source_line(tmp_path):
    log = (f"Error building extension 'cuda_extension': [1/3] c++ -MMD -c {tmp_path}/kernels/relu.cpp -O3 ...\n"
           "FAILED: relu.o\n"
           f"{tmp_path}/kernels/relu.cpp: In function 'at::Tensor relu(at::Tensor)':\n"
           f"{tmp_path}/kernels/relu.cpp:7:3: error: 'flaot' was not declared in this scope\n"
           "    7 |   flaot value = 0;\n"
           "      |   ^~~~~\n"
           "ninja: build stopped: subcommand failed.\n")
    trimmed = trim_build_log(log, tmp_path)
    assert trimmed.splitlines() == ["kernels/relu.cpp:7:3: error: 'flaot' was not declared in this scope",
                                    "    7 |   flaot value = 0;", "      |   ^~~~~"]


def test_failure_descriptions_name_the_failing_trial_and_violations(toolbox):
    incorrect = Result("p", "c", status="incorrect", trials=[
        TrialResult(0, True, 0.0, 0.0, 0, 16),
        TrialResult(1, False, 0.5, 2.0, 3, 16, "values differ")])
    text = toolbox._describe_failure(incorrect)
    assert "1/2 trials correct" in text and "first failing trial 1: values differ (3 of 16 elements" in text
    violation = Result("p", "c", status="violation", violations=[Violation("fallback_op", "calls torch.tanh")])
    assert "violation [fallback_op]: calls torch.tanh" in toolbox._describe_failure(violation)
    crashed = Result("p", "c", status="runtime_error", error="forward failed: boom", log="trace...")
    assert "forward failed: boom" in toolbox._describe_failure(crashed) and "trace..." in toolbox._describe_failure(crashed)


@pytest.mark.slow
def test_compile_reports_the_compiler_error(toolbox):
    call(toolbox, "write_file", path="model_new.py", content="import cuda_extension\nclass ModelNew:\n    pass\n")
    call(toolbox, "write_file", path="kernels/broken.cpp", content="#include <torch/types.h>\nflaot broken() { return 0; }\n")
    outcome = call(toolbox, "compile")
    assert outcome.error and outcome.text.startswith("compile: FAILED")
    assert "kernels/broken.cpp:2" in outcome.text and "flaot" in outcome.text
    assert str(toolbox.workspace.root) not in outcome.text


def test_the_agents_evaluations_never_share_a_reference(tmp_path):
    """The agent writes each version after reading the last one's Result and log: sharing a batch's
    trial inputs with it would let it answer them from memory (reference_batch.py)."""

    class RecordingPool:
        def __init__(self):
            self.configs = []

        def evaluate(self, problem, candidate, config):
            self.configs.append(config)
            return Result(str(problem), str(candidate), status="passed", passed=True, correct=True, reward=2.0)

    workspace = Workspace.create(PROBLEM, tmp_path / "ws", "cpu")
    (workspace.root / "model_new.py").write_text("class ModelNew: pass\n")
    pool = RecordingPool()
    toolbox = Toolbox(workspace, pool, ToolboxConfig(EvalConfig(device="cpu", reference_batch="a-batch")))
    call(toolbox, "verify")
    call(toolbox, "profile")
    toolbox.evaluate_final()
    assert len(pool.configs) == 3 and {config.reference_batch for config in pool.configs} == {""}
