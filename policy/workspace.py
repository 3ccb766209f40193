"""One agent's working directory for one task, laid out as the evaluator expects a workspace
candidate, with path checks that keep the agent's writes inside it and off the protected files."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from pytest_cudaagent.core.files import FIXED_BINDING_FILES, WORKSPACE_FILES_DIR, WORKSPACE_KERNELS

TEMPLATE_DIR = Path(__file__).parent / "workspace_template"
SKILL_FILE = Path(__file__).parent / "SKILL.md"
REFERENCE_FILE = "model.py"
MODEL_NEW_FILE = "model_new.py"
# The evaluator checks model.py and the binding files by hash (rule `tampering`); SKILL.md and
# README.md are guides whose edits would only mislead the agent itself.
PROTECTED_FILES = (REFERENCE_FILE, *FIXED_BINDING_FILES, "SKILL.md", "README.md")
# Build outputs and caches the agent's commands may leave; never part of a fingerprint.
IGNORED_DIRS = {"__pycache__", "build", ".cache", ".tmp"}


class WorkspaceError(ValueError):
    """A path the agent may not use; the message says which paths it may use instead."""


@dataclass(frozen=True)
class Workspace:
    root: Path
    problem: Path  # the problem file that model.py copies, for the evaluator
    device: str  # "cuda" (kernels/*.cu) or "cpu" (kernels/*.cpp)

    @classmethod
    def create(cls, problem: str | Path, root: str | Path, device: str) -> Workspace:
        """Lay out a fresh workspace at `root` (which must not hold one already)."""
        if device not in ("cuda", "cpu"):
            raise WorkspaceError(f"device {device!r}: a workspace is for 'cuda' or 'cpu'")
        problem, root = Path(problem).resolve(), Path(root).resolve()
        if root.exists() and any(root.iterdir()):
            raise WorkspaceError(f"{root} is not empty; give each episode a fresh directory")
        (root / WORKSPACE_KERNELS).mkdir(parents=True, exist_ok=True)
        for template_file in TEMPLATE_DIR.iterdir():
            shutil.copy(template_file, root / template_file.name)
        shutil.copy(SKILL_FILE, root / "SKILL.md")
        shutil.copy(problem, root / REFERENCE_FILE)
        for name in FIXED_BINDING_FILES:
            shutil.copy(WORKSPACE_FILES_DIR / name, root / name)
        workspace = cls(root, problem, device)
        for name in PROTECTED_FILES:
            _make_read_only(root / name)
        return workspace

    @property
    def kernel_suffix(self) -> str:
        return ".cu" if self.device == "cuda" else ".cpp"

    # -- paths ------------------------------------------------------------------------------------

    def resolve(self, relative: str) -> Path:
        """The absolute path of `relative` inside the workspace, or WorkspaceError."""
        if not isinstance(relative, str) or not relative.strip():
            raise WorkspaceError("give a path relative to the workspace, e.g. kernels/relu.cu")
        candidate = Path(relative)
        path = (candidate if candidate.is_absolute() else self.root / candidate).resolve()
        if path != self.root and self.root not in path.parents:
            raise WorkspaceError(
                f"{relative} is outside the workspace; use paths inside it such as "
                f"model_new.py or kernels/<name>{self.kernel_suffix}"
            )
        return path

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def writable(self, relative: str) -> Path:
        """The path to write `relative` to, refusing protected files and directories."""
        path = self.resolve(relative)
        if self.relative(path) in PROTECTED_FILES:
            raise WorkspaceError(
                f"{self.relative(path)} is protected (read-only); write model_new.py and files "
                f"under kernels/ instead"
            )
        if path.is_dir() or path == self.root:
            raise WorkspaceError(f"{relative} is a directory; give a file path")
        return path

    def files(self) -> list[str]:
        """Every file of the workspace, relative, build outputs left out."""
        found = []
        for directory, subdirs, names in os.walk(self.root):
            subdirs[:] = sorted(d for d in subdirs if d not in IGNORED_DIRS)
            found += [self.relative(Path(directory) / name) for name in sorted(names)]
        return found

    # -- integrity --------------------------------------------------------------------------------

    def _originals(self) -> dict[str, Path]:
        """Each protected file's original: the problem, the package's guides and binding files."""
        originals = {REFERENCE_FILE: self.problem, "SKILL.md": SKILL_FILE,
                     "README.md": TEMPLATE_DIR / "README.md"}
        originals.update({name: WORKSPACE_FILES_DIR / name for name in FIXED_BINDING_FILES})
        return originals

    def protected_digests(self) -> dict[str, str]:
        """The hash each protected file must have."""
        return {name: _digest(path) for name, path in self._originals().items()}

    def restore_protected(self) -> list[str]:
        """Put back any protected file that differs from its original; the names restored."""
        restored = []
        for name, original in self._originals().items():
            path = self.root / name
            if path.is_file() and not path.is_symlink() and _digest(path) == _digest(original):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.is_symlink() or path.exists():
                path.unlink()  # unlinking needs write access to the directory, not the file
            shutil.copy(original, path)
            _make_read_only(path)
            restored.append(name)
        return restored

    def fingerprint(self) -> str:
        """A hash of every file's name and content: equal fingerprints, equal candidates."""
        digest = hashlib.sha256()
        for relative in self.files():
            path = self.root / relative
            digest.update(relative.encode())
            digest.update(path.read_bytes() if path.is_file() else b"")
        return digest.hexdigest()[:16]

    def has_candidate(self) -> bool:
        return (self.root / MODEL_NEW_FILE).is_file()


def _digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _make_read_only(path: Path) -> None:
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
