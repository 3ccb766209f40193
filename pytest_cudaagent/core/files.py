"""Checks problem and candidate files before anything runs, and loads them inside workers."""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

WORKSPACE_MODEL_NEW = "model_new.py"
WORKSPACE_KERNELS = "kernels"
# The fixed binding infrastructure of a CUDA-Agent workspace. The evaluator compiles its own
# copies of these (workspace_files/), never the workspace's, so editing them gains nothing.
FIXED_BINDING_FILES = ("binding.cpp", "binding_registry.h")
WORKSPACE_FILES_DIR = Path(__file__).parent / "workspace_files"
WORKSPACE_CFLAGS = ["-O3"]  # the evaluator's flags for a workspace's C++ (fast_build builds its PCH)


class BadFileError(ValueError):
    """A problem or candidate file that cannot be evaluated; the message says what to fix."""


def _top_level_names(path: Path) -> tuple[set[str], set[str]]:
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as error:
        raise BadFileError(f"{path}: syntax error on line {error.lineno}: {error.msg}") from None
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    return classes, functions


def check_problem(path: str | Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise BadFileError(f"{path}: no such problem file")
    classes, functions = _top_level_names(path)
    missing = [name for name in ("Model",) if name not in classes]
    missing += [name for name in ("get_inputs", "get_init_inputs") if name not in functions]
    if missing:
        raise BadFileError(
            f"{path}: no {', '.join(missing)}; a problem must define class Model, "
            "get_inputs() and get_init_inputs()"
        )
    return path


@dataclass(frozen=True)
class Candidate:
    """A candidate as found on disk: one `.py` file, or a CUDA-Agent workspace directory."""

    path: Path
    model_file: Path  # the file that defines ModelNew
    workspace: bool

    def kernel_sources(self) -> list[Path]:
        if not self.workspace:
            return []
        kernels = self.path / WORKSPACE_KERNELS
        return sorted(p for p in kernels.glob("*") if p.suffix in (".cu", ".cpp", ".h", ".cuh"))

    def source_files(self) -> list[Path]:
        return [self.model_file, *self.kernel_sources()]

    def protected_hashes(self, problem: Path) -> dict[Path, str]:
        """Workspace files the agent may not change, with the hash each must have: the fixed
        binding files equal the evaluator's copies, model.py the problem, utils/ as found."""
        if not self.workspace:
            return {}
        expected = {self.path / name: file_hash(WORKSPACE_FILES_DIR / name) for name in FIXED_BINDING_FILES}
        expected[self.path / "model.py"] = file_hash(problem)
        for path in sorted((self.path / "utils").rglob("*")) if (self.path / "utils").is_dir() else ():
            if path.is_file():
                expected[path] = file_hash(path)
        return {path: digest for path, digest in expected.items() if path.exists() or path.name != "model.py"}

    def extensions_dir(self, cache_dir: Path) -> Path:
        """Where this candidate's extensions build: one directory per source hash, so the same
        candidate never builds twice and two candidates reusing an extension name never
        overwrite each other's build."""
        return Path(cache_dir) / "extensions" / self.source_hash()

    def source_hash(self) -> str:
        digest = hashlib.sha256()
        for path in self.source_files():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]


def check_candidate(path: str | Path) -> Candidate:
    path = Path(path)
    if path.is_dir():
        model_file = path / WORKSPACE_MODEL_NEW
        if not model_file.is_file():
            raise BadFileError(
                f"{path}: a workspace directory must contain {WORKSPACE_MODEL_NEW} "
                f"(and its kernels in {WORKSPACE_KERNELS}/)"
            )
        candidate = Candidate(path, model_file, workspace=True)
    elif path.is_file():
        candidate = Candidate(path, path, workspace=False)
    else:
        raise BadFileError(f"{path}: no such candidate file or workspace directory")
    classes, _ = _top_level_names(candidate.model_file)
    if "ModelNew" not in classes:
        raise BadFileError(
            f"{candidate.model_file}: no class ModelNew; a candidate must define "
            "class ModelNew(nn.Module) with the same constructor as the problem's Model"
        )
    return candidate


def file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the file's source on every import, and neither reads nor writes its bytecode.
    Python takes a file's cached bytecode as current while its size and modification second are
    unchanged: an agent that rewrites its candidate within a second, to the same length (a constant
    changed, 1 to 2), would otherwise be evaluated on the code it had before."""

    def path_stats(self, path):
        raise OSError("an evaluated file is compiled from its source")  # SourceLoader: no bytecode


def import_file(path: str | Path, module_name: str) -> ModuleType:
    """Import a .py file as a fresh module under `module_name`, compiled from its source as it is now."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(module_name, path,
                                                  loader=_SourceOnlyLoader(module_name, str(path)))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


# A source for a DSL whose kernel decorator reads the kernel's source from its file (Triton's
# @jit, TileLang, CuTe): KernelBench loads these from a file (its triton/tilelang/cute backends).
NEEDS_ITS_FILE = re.compile(r"^\s*(?:import|from)\s+(?:triton|tilelang|cutlass)\b", re.MULTILINE)


def exec_file(path: str | Path, module_name: str) -> ModuleType:
    """Run a .py file's source as KernelBench's eval runs a candidate (`exec` of the source
    text), in a fresh module under `module_name`: its code has no file behind it, so whatever
    reads a function's source fails as it fails there (`torch.jit.script` of a function it
    defines: unguarded, the load fails; inside try/except, the except branch runs). A source
    that NEEDS_ITS_FILE is imported from its file instead, as KernelBench does."""
    path = Path(path)
    source = path.read_text()
    if NEEDS_ITS_FILE.search(source):
        return import_file(path, module_name)
    module = ModuleType(module_name)
    sys.modules[module_name] = module
    # Not a path: inspect and linecache find no source under this name (call sites still read it).
    code = compile(source, f"<exec'd {path.name}>", "exec")
    sys.path.insert(0, str(path.parent))
    try:
        exec(code, module.__dict__)
    finally:
        sys.path.remove(str(path.parent))
    return module


def build_workspace_extension(candidate: Candidate, device: str, build_dir: Path) -> ModuleType | None:
    """Compile a workspace's kernels with the evaluator's own binding files as `cuda_extension`.
    A workspace without kernel sources for this device (Triton kernels only) builds nothing."""
    from torch.utils.cpp_extension import load

    kernel_dir = candidate.path / WORKSPACE_KERNELS
    sources = sorted(kernel_dir.glob("*.cpp"))
    if device == "cuda":
        sources += sorted(kernel_dir.glob("*.cu"))
    if not sources:
        return None
    sources.append(WORKSPACE_FILES_DIR / "binding.cpp")
    build_dir.mkdir(parents=True, exist_ok=True)
    module = load(
        name="cuda_extension",
        sources=[str(s) for s in sources],
        extra_include_paths=[str(WORKSPACE_FILES_DIR), str(kernel_dir)],
        extra_cflags=WORKSPACE_CFLAGS,
        extra_cuda_cflags=["-O3", "--use_fast_math"] if device == "cuda" else None,
        build_directory=str(build_dir),
        with_cuda=device == "cuda",
        verbose=False,
    )
    sys.modules["cuda_extension"] = module
    return module
