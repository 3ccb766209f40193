"""Where the kernels that ran during `forward` came from, and what precision they suggest."""

from __future__ import annotations

import re

from ..core.files import Candidate
from .rules import ALLOWED_TORCH_KERNELS, LIBRARY_KERNELS, Policy

_HALF_PRECISION = re.compile(r"bf16|f16|fp16|half|hmma|h884|h1688", re.IGNORECASE)
_TF32 = re.compile(r"tf32|s1688|s16816", re.IGNORECASE)


_GLOBAL_FUNCTION = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)")
_LIBRARY_NAMESPACES = ("at::", "c10::", "cub::", "thrust::", "cutlass::", "cublas", "cudnn")


def source_kernel_names(texts: list[str]) -> set[str]:
    """Names of the `__global__` functions defined in the candidate's CUDA sources."""
    return {match.group(1) for text in texts for match in _GLOBAL_FUNCTION.finditer(text)}


def own_kernel_names(candidate: Candidate, modules: dict) -> list[str]:
    """Kernels the candidate defines: `__global__` functions in its sources (the model file's
    strings and its kernel files) and the Triton kernels its module holds."""
    texts = [path.read_text(errors="replace") for path in candidate.source_files()]
    names = source_kernel_names(texts)
    module = modules.get("cudaagent_candidate")
    for value in vars(module).values() if module else ():
        if type(value).__name__ in ("JITFunction", "Autotuner", "Heuristics"):
            function = value
            while hasattr(function, "fn"):
                function = function.fn
            names.add(getattr(function, "__name__", ""))
    return sorted(name for name in names if name)


def kernel_base_name(kernel: str) -> str:
    """`void relu_kernel<float>(float*, int)` -> `relu_kernel`; keeps `ns::` prefixes out."""
    kernel = kernel.replace("(anonymous namespace)::", "")
    head = re.sub(r"<.*>", "", kernel.split("(")[0]).strip()
    head = head.split()[-1] if head.split() else head
    return head.split("::")[-1]


def foreign_kernels(kernel_names: list[str], own_names: list[str], policy: Policy) -> list[str]:
    """Kernels that are neither the candidate's, nor allowed library or allocation kernels."""
    foreign = []
    for kernel in kernel_names:
        # A name inside a library namespace is never the candidate's, whatever it is called.
        signature = kernel.replace("(anonymous namespace)::", "").split("(")[0]
        library_namespace = any(prefix in signature for prefix in _LIBRARY_NAMESPACES)
        if not library_namespace and kernel_base_name(kernel) in own_names:
            continue
        if ALLOWED_TORCH_KERNELS.search(kernel):
            continue
        if policy.allow_library_gemm and LIBRARY_KERNELS.search(kernel):
            continue
        if policy.allow_torch_compute:
            continue
        foreign.append(kernel)
    return foreign


def precision_flags(kernel_names: list[str], tf32_allowed: bool = False) -> set[str]:
    """Kernels whose names say half precision, or TF32 when the run's own backend settings do not
    allow it (under pytorch-default cuDNN picks TF32 convolutions for the eager baseline too: a
    candidate's switch to TF32 beyond the settings is caught by backend_settings instead)."""
    return {f"lower-precision kernel: {name[:120]}" for name in kernel_names
            if _HALF_PRECISION.search(name) or (not tf32_allowed and _TF32.search(name))}
