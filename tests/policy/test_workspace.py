"""Workspace layout, path confinement, protected files and their restoration."""

import hashlib
from pathlib import Path

import pytest

from policy.workspace import PROTECTED_FILES, Workspace, WorkspaceError
from pytest_cudaagent.core.files import Candidate

PROBLEM = Path(__file__).parents[2] / "examples" / "problems" / "leaky_relu.py"


@pytest.fixture
def workspace(tmp_path):
    return Workspace.create(PROBLEM, tmp_path / "ws", "cpu")


def test_layout_matches_what_the_evaluator_checks(workspace):
    files = set(workspace.files())
    assert {"model.py", "binding.cpp", "binding_registry.h", "SKILL.md", "README.md"} <= files
    assert (workspace.root / "kernels").is_dir()
    assert (workspace.root / "model.py").read_bytes() == PROBLEM.read_bytes()
    # The evaluator's own hash check must accept a fresh workspace: same digests it expects.
    (workspace.root / "model_new.py").write_text("class ModelNew: pass\n")
    expected = Candidate(workspace.root, workspace.root / "model_new.py", True).protected_hashes(PROBLEM)
    for path, digest in expected.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_paths_outside_and_protected_files_are_refused(workspace, tmp_path):
    for outside in ("../escape.py", "/etc/passwd", str(tmp_path / "other.py"), "kernels/../../x"):
        with pytest.raises(WorkspaceError, match="outside the workspace"):
            workspace.resolve(outside)
    for name in PROTECTED_FILES:
        with pytest.raises(WorkspaceError, match="protected"):
            workspace.writable(name)
    with pytest.raises(WorkspaceError, match="protected"):
        workspace.writable("kernels/../binding.cpp")
    assert workspace.writable("kernels/relu.cpp") == workspace.root / "kernels" / "relu.cpp"


def test_symlink_out_of_the_workspace_is_refused(workspace, tmp_path):
    (tmp_path / "secret").write_text("x")
    (workspace.root / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(WorkspaceError, match="outside"):
        workspace.writable("link")


def test_restore_puts_back_changed_deleted_and_replaced_protected_files(workspace):
    (workspace.root / "binding.cpp").chmod(0o644)
    (workspace.root / "binding.cpp").write_text("// changed")
    (workspace.root / "model.py").unlink()
    (workspace.root / "SKILL.md").unlink()
    (workspace.root / "SKILL.md").mkdir()
    assert sorted(workspace.restore_protected()) == ["SKILL.md", "binding.cpp", "model.py"]
    assert workspace.restore_protected() == []
    assert (workspace.root / "model.py").read_bytes() == PROBLEM.read_bytes()


def test_fingerprint_follows_content_but_not_build_outputs(workspace):
    before = workspace.fingerprint()
    (workspace.root / "__pycache__").mkdir()
    (workspace.root / "__pycache__" / "x.pyc").write_bytes(b"1")
    assert workspace.fingerprint() == before
    (workspace.root / "kernels" / "a.cpp").write_text("int a;")
    assert workspace.fingerprint() != before


def test_fresh_directory_and_known_device_required(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(WorkspaceError, match="not empty"):
        Workspace.create(PROBLEM, tmp_path / "full", "cpu")
    with pytest.raises(WorkspaceError, match="cuda' or 'cpu"):
        Workspace.create(PROBLEM, tmp_path / "new", "tpu")
