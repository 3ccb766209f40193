"""Static scans of a candidate's Python and C++/CUDA sources: the second line of defence.

Findings use the same rule names as the run-time checks; the evaluator makes a finding a
violation only when a run-time check confirms its rule, otherwise it is a warning with a reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import torch

from ..core.files import Candidate
from ..core.result import Violation
from .rules import ALLOCATION_OPS, VIEW_OPS

_ALLOWED_TORCH_CALLS = ALLOCATION_OPS | VIEW_OPS | {
    "device", "dtype", "Size", "no_grad", "inference_mode", "is_tensor", "is_grad_enabled",
    "get_default_dtype", "cuda", "current_stream", "Stream", "Event", "tensor", "as_tensor",
    "is_floating_point", "result_type", "promote_types", "finfo", "iinfo",
}
_HOST_METHODS = {"cpu", "numpy", "item", "tolist"}
_EXIT_CALLS = {("sys", "exit"), ("os", "_exit"), ("os", "abort"), ("os", "kill"), (None, "exit"), (None, "quit")}
_INTROSPECTION_MODULES = {"gc", "inspect", "ctypes"}
_PATCH_ROOTS = {"torch", "time", "triton", "sys", "builtins", "os", "numpy", "np", "F", "nn"}
_THREAD_MODULES = {"threading", "multiprocessing", "concurrent", "_thread"}
_PROCESS_MODULES = {"subprocess", "multiprocessing", "pty"}

# torch::/at:: names that allocate, describe or wrap tensors rather than compute.
_CPP_ALLOWED = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "from_blob", "Tensor", "TensorOptions", "Device", "device", "dtype", "kFloat",
    "kHalf", "kBFloat16", "kInt", "kLong", "kCUDA", "kCPU", "ScalarType", "IntArrayRef", "Scalar",
    "cuda", "getCurrentCUDAStream", "OptionalCUDAGuard", "CUDAGuard", "TensorArg", "checkContiguous",
    "Half", "BFloat16", "native", "Layout", "MemoryFormat", "detail", "zeros_symint", "TensorAccessor",
    "PackedTensorAccessor32", "PackedTensorAccessor64", "RestrictPtrTraits", "DefaultPtrTraits",
    "stream", "Generator", "globalContext", "NoGradGuard", "InferenceMode", "AutoDispatchBelowADInplaceOrView",
}
_CPP_NAMESPACE_CALL = re.compile(r"\b(?:torch|at)::(?:[A-Za-z_]\w*::)*([A-Za-z_]\w*)\s*[(<]")


def _tensor_compute_methods() -> set[str]:
    names = {name for name in dir(torch.Tensor) if not name.startswith("_") and callable(getattr(torch.Tensor, name, None))}
    return names - _ALLOWED_TORCH_CALLS - {
        "size", "stride", "dim", "numel", "data_ptr", "is_contiguous", "device", "dtype",
        "scalar_type", "element_size", "options", "sizes", "strides", "type", "ndimension", "nbytes",
        "get_device", "is_cuda", "storage_offset", "const_data_ptr", "mutable_data_ptr", "defined",
        "to", "requires_grad_", "register_hook", "backward", "nelement", "untyped_storage",
    }


def _dotted(node: ast.AST) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return []


class _PythonScan(ast.NodeVisitor):
    def __init__(self, path: Path):
        self.path = path
        self.findings: list[Violation] = []
        self.torch_aliases = {"torch"}
        self.functional_aliases = {"F"}
        self.in_forward = False
        self.forward_args: set[str] = set()

    def add(self, rule: str, node: ast.AST, detail: str) -> None:
        finding = Violation(rule, f"{self.path.name}:{getattr(node, 'lineno', '?')}: {detail}")
        if finding not in self.findings:
            self.findings.append(finding)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            root = alias.name.split(".")[0]
            self._note_import(node, root, alias.name)
            if alias.name == "torch.nn.functional":
                self.functional_aliases.add(alias.asname or alias.name)
            if root == "torch" and alias.asname and "." not in alias.name:
                self.torch_aliases.add(alias.asname)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        root = (node.module or "").split(".")[0]
        self._note_import(node, root, node.module or "")
        for alias in node.names:
            if alias.name == "Model":
                self.add("reference_access", node, f"imports the reference Model from {node.module}")
            if node.module == "torch.nn" and alias.name == "functional":
                self.functional_aliases.add(alias.asname or "functional")
        self.generic_visit(node)

    def _note_import(self, node, root: str, name: str) -> None:
        if root in _INTROSPECTION_MODULES:
            self.add("reference_access", node, f"imports {name} (introspection can reach the harness)")
        if root in _PROCESS_MODULES:
            self.add("subprocess", node, f"imports {name}")
        elif root in _THREAD_MODULES:
            self.add("background_thread", node, f"imports {name}")
        if root in ("importlib",):
            self.add("fallback_op", node, "imports importlib (names built at run time)")
        if root in ("model", "reference") or name.endswith(".model"):
            self.add("reference_access", node, f"imports {name}, the reference problem")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if _dotted(base)[-1:] == ["Model"]:
                self.add("reference_access", node, f"{node.name} subclasses the reference Model")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name == "forward":
            outer = (self.in_forward, self.forward_args)
            self.in_forward = True
            self.forward_args = {a.arg for a in node.args.args[1:]}
            self.generic_visit(node)
            self.in_forward, self.forward_args = outer
        else:
            self.generic_visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        if self.in_forward and node.handlers:
            self.add("fallback_op", node, "try/except in forward (a fallback path)")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if self.in_forward:
            operands = [n.id for n in (node.left, node.right) if isinstance(n, ast.Name)]
            if isinstance(node.op, ast.MatMult) or any(name in self.forward_args for name in operands):
                self.add("fallback_op", node, f"tensor operator {type(node.op).__name__} in forward")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _dotted(node.value) == ["sys", "modules"]:
            self.add("reference_access", node, "reads sys.modules")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _dotted(node) == ["sys", "modules"]:
            self.add("reference_access", node, "reads sys.modules")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_patch(target, node)
        self.generic_visit(node)

    def _check_patch(self, target: ast.AST, node: ast.AST) -> None:
        parts = _dotted(target)
        if len(parts) >= 2 and parts[0] in _PATCH_ROOTS | self.torch_aliases:
            self.add("monkeypatch", node, f"assigns {'.'.join(parts)}")

    def visit_Call(self, node: ast.Call) -> None:
        parts = _dotted(node.func)
        if parts:
            head, last = parts[0], parts[-1]
            pair = (parts[-2] if len(parts) >= 2 else None, last)
            if pair in _EXIT_CALLS:
                self.add("exit_call", node, f"calls {'.'.join(parts)}")
            if last == "setattr" and node.args and _dotted(node.args[0])[:1] and _dotted(node.args[0])[0] in _PATCH_ROOTS | self.torch_aliases:
                self.add("monkeypatch", node, f"setattr on {'.'.join(_dotted(node.args[0]))}")
            if last in ("Thread", "Timer", "start_new_thread", "ThreadPoolExecutor", "Process"):
                self.add("background_thread", node, f"starts {'.'.join(parts)}")
            if head == "subprocess" or last in ("system", "popen", "Popen"):
                self.add("subprocess", node, f"runs {'.'.join(parts)}")
            if last in ("write_text", "write_bytes") or (last == "open" and _opens_for_writing(node)):
                self.add("file_write", node, f"writes a file ({'.'.join(parts)})")
            if head in _INTROSPECTION_MODULES and last in ("get_objects", "get_referrers", "stack", "currentframe", "getmembers"):
                self.add("reference_access", node, f"calls {'.'.join(parts)}")
            if self.in_forward:
                self._check_forward_call(node, parts)
        self.generic_visit(node)

    def _check_forward_call(self, node: ast.Call, parts: list[str]) -> None:
        head, last = parts[0], parts[-1]
        dotted = ".".join(parts)
        if head in self.torch_aliases or head in self.functional_aliases:
            if last not in _ALLOWED_TORCH_CALLS:
                self.add("fallback_op", node, f"calls {dotted} in forward")
        elif head in ("np", "numpy", "scipy", "math") and head != "math":
            self.add("host_compute", node, f"calls {dotted} in forward")
        elif last in _HOST_METHODS and len(parts) >= 2:
            self.add("host_compute", node, f"calls .{last}() in forward")
        elif last in ("getattr", "__import__", "import_module", "eval", "exec"):
            self.add("fallback_op", node, f"calls {last} in forward (names built at run time)")
        elif len(parts) >= 2 and parts[0] in self.forward_args and last in _tensor_compute_methods():
            self.add("fallback_op", node, f"tensor method .{last}() in forward")


def _opens_for_writing(node: ast.Call) -> bool:
    modes = [a for a in node.args[1:2]] + [k.value for k in node.keywords if k.arg == "mode"]
    return any(isinstance(m, ast.Constant) and isinstance(m.value, str) and set(m.value) & set("wax+") for m in modes)


def scan_python(path: Path) -> list[Violation]:
    source = Path(path).read_text()
    scanner = _PythonScan(Path(path))
    scanner.visit(ast.parse(source, filename=str(path)))
    cpp_strings = [node.value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Constant) and isinstance(node.value, str) and "{" in node.value]
    for text in cpp_strings:
        scanner.findings += scan_cpp_text(text, Path(path).name)
    return scanner.findings


_CPP_COMPUTE_METHODS = None


def scan_cpp_text(text: str, origin: str) -> list[Violation]:
    """`torch::`/`at::` compute calls and tensor compute methods in C++/CUDA source text."""
    global _CPP_COMPUTE_METHODS
    if _CPP_COMPUTE_METHODS is None:
        _CPP_COMPUTE_METHODS = _tensor_compute_methods() - {"data", "copy_", "contiguous", "view", "reshape", "fill_", "zero_"}
    findings: list[Violation] = []
    for line_number, line in enumerate(text.splitlines(), 1):
        code = line.split("//")[0]
        for match in _CPP_NAMESPACE_CALL.finditer(code):
            name = match.group(1)
            if name not in _CPP_ALLOWED and not name[0].isupper() and name not in ("cuda",):
                findings.append(Violation("fallback_op", f"{origin}:{line_number}: calls {match.group(0).rstrip('(<').strip()} in C++"))
        for match in re.finditer(r"\.\s*([a-z_]\w*)\s*\(", code):
            if match.group(1) in _CPP_COMPUTE_METHODS and re.search(r"(torch|at)::|Tensor", text):
                findings.append(Violation("fallback_op", f"{origin}:{line_number}: tensor method .{match.group(1)}() in C++"))
    return findings


def scan_candidate(candidate: Candidate) -> list[Violation]:
    findings = scan_python(candidate.model_file)
    for source in candidate.kernel_sources():
        findings += scan_cpp_text(source.read_text(errors="replace"), source.name)
    unique: list[Violation] = []
    for finding in findings:
        if finding not in unique:
            unique.append(finding)
    return unique
