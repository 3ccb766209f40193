"""Where the kernels that ran during `forward` came from, and what precision they suggest."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from .rules import ALLOWED_TORCH_KERNELS, LIBRARY_KERNELS, Policy

_LOWER_PRECISION = re.compile(r"tf32|bf16|f16|fp16|half|hmma|h884|h1688|s1688|s16816", re.IGNORECASE)


def _extension_libraries(modules: dict, extensions_dir: Path) -> list[Path]:
    """Shared objects of the candidate's compiled extensions (built under `extensions_dir`)."""
    libraries = []
    for module in list(modules.values()):
        path = Path(getattr(module, "__file__", None) or "")
        if path.suffix == ".so" and path.resolve().is_relative_to(extensions_dir.resolve()):
            libraries.append(path)
    return libraries


def own_kernel_names(modules: dict, extensions_dir: Path) -> list[str]:
    """Symbol names of the candidate's compiled extensions and its Triton kernels' names."""
    names: set[str] = set()
    for library in _extension_libraries(modules, extensions_dir):
        try:
            listing = subprocess.run(["nm", "-C", str(library)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in listing.stdout.splitlines():
            symbol = line.split(" ", 2)[-1]
            if "__device_stub__" in symbol or "__global__" in symbol or "kernel" in symbol.lower():
                names.add(_base_name(symbol.replace("__device_stub__", "")))
    candidate = modules.get("cudaagent_candidate")
    for value in vars(candidate).values() if candidate else ():
        if type(value).__name__ in ("JITFunction", "Autotuner", "Heuristics"):
            function = getattr(value, "fn", value)
            while hasattr(function, "fn"):
                function = function.fn
            names.add(getattr(function, "__name__", ""))
    return sorted(name for name in names if name)


def _base_name(symbol: str) -> str:
    """`void ns::relu_kernel<float>(float*, int)` -> `relu_kernel`."""
    head = symbol.split("(")[0]
    head = re.sub(r"<.*>", "", head)
    head = head.split()[-1] if head.split() else head
    head = head.split("::")[-1]
    # nm shows the stub of `relu_kernel` as `_Z11relu_kernelPfi`-style remnants when unmangled
    match = re.match(r"_Z\d+(\w+)", head)
    if match:
        length = re.match(r"_Z(\d+)", head).group(1)
        head = match.group(1)[: int(length)] if length.isdigit() else head
    return head


def foreign_kernels(kernel_names: list[str], own_names: list[str], policy: Policy) -> list[str]:
    """Kernels that are neither the candidate's, nor allowed library or allocation kernels."""
    foreign = []
    for kernel in kernel_names:
        base = _base_name(kernel)
        if any(own and (own == base or own in kernel) for own in own_names):
            continue
        if ALLOWED_TORCH_KERNELS.search(kernel):
            continue
        if policy.allow_library_gemm and LIBRARY_KERNELS.search(kernel):
            continue
        if policy.allow_torch_compute:
            continue
        foreign.append(kernel)
    return foreign


def precision_flags(kernel_names: list[str]) -> set[str]:
    return {f"lower-precision kernel: {name[:120]}" for name in kernel_names if _LOWER_PRECISION.search(name)}
