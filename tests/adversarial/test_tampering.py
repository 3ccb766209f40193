"""Protected files of a CUDA-Agent workspace: the reference, the fixed bindings, utils/."""

import shutil

import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.core.files import WORKSPACE_FILES_DIR
from tests.adversarial.test_adversarial_cpu import HERE, PROBLEM
from tests.helpers import cpu_config

HONEST_TRITON = HERE / "honest" / "triton_with_views.py"


def make_workspace(root):
    workspace = root / "workspace"
    (workspace / "kernels").mkdir(parents=True)
    (workspace / "utils").mkdir()
    (workspace / "utils" / "verify.py").write_text("# the workspace's copy of the verification script\n")
    for name in ("binding.cpp", "binding_registry.h"):
        shutil.copy(WORKSPACE_FILES_DIR / name, workspace / name)
    shutil.copy(PROBLEM, workspace / "model.py")
    shutil.copy(HONEST_TRITON, workspace / "model_new.py")
    return workspace


def test_untouched_workspace_passes(tmp_path):
    result = evaluate(PROBLEM, make_workspace(tmp_path), cpu_config())
    assert result.passed, result.summary()


@pytest.mark.parametrize("protected", ["binding.cpp", "binding_registry.h", "model.py"])
def test_edited_protected_file_is_tampering(tmp_path, protected):
    workspace = make_workspace(tmp_path)
    with open(workspace / protected, "a") as handle:
        handle.write("\n// edited by the agent\n" if protected != "model.py" else "\n# edited by the agent\n")
    result = evaluate(PROBLEM, workspace, cpu_config())
    assert result.status == "violation" and not result.passed
    assert any(v.rule == "tampering" and protected in v.detail for v in result.violations)


def test_protected_file_changed_during_evaluation_is_refused_or_tampering(tmp_path):
    workspace = make_workspace(tmp_path)
    verify = workspace / "utils" / "verify.py"
    original = verify.read_text()
    model_new = workspace / "model_new.py"
    model_new.write_text(
        "import pathlib\n"
        "pathlib.Path(__file__).with_name('utils').joinpath('verify.py').write_text('PASSED = True\\n')\n"
        + model_new.read_text())
    result = evaluate(PROBLEM, workspace, cpu_config())
    assert not result.passed and result.reward == -1
    if result.env["sandbox"].get("landlock"):  # the workspace is read-only to the candidate
        assert result.status == "build_error" and "Permission denied" in result.error
        assert verify.read_text() == original
    else:
        assert any(v.rule == "tampering" and "verify.py" in v.detail for v in result.violations)
