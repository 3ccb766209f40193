"""Anti-hacking policy: which PyTorch operators and library kernels a candidate may use.

`strict` is the paper's rule set (only tensor creation, views and the candidate's own kernels
inside `forward`); `permissive` is KernelBench's (PyTorch glue allowed, but some kernel of the
candidate's own must run); `calibration` is permissive without that last rule, for measuring the
harness itself with a problem's own reference as its candidate (it judges no submission).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Allocation and initialisation: every kernel needs somewhere to write.
ALLOCATION_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "ones", "ones_like", "new_zeros", "new_ones", "zero_", "fill_", "full",
    "full_like", "scalar_tensor", "lift_fresh", "resize_",
})
# Views and layout: no arithmetic, only metadata, or a plain copy (contiguous -> clone).
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as",
    "permute", "transpose", "t", "squeeze", "unsqueeze", "select", "slice", "narrow", "split",
    "split_with_sizes", "chunk", "unbind", "alias", "detach", "view_as", "flatten", "unflatten",
    "contiguous", "clone", "copy_", "movedim", "_unsafe_split", "unfold", "diagonal",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous", "size",
    "stride", "dim", "numel",
})
# Kernels that allowed ops launch themselves (fill for zeros/ones, copies for contiguous).
ALLOWED_TORCH_KERNELS = re.compile(r"FillFunctor|fill_kernel|copy_kernel|Memset|Memcpy|CatArrayBatchedCopy")
# cuBLAS / cuDNN / CUTLASS kernel names, allowed for GEMM and convolution when the policy says.
LIBRARY_KERNELS = re.compile(
    r"gemm|cublas|cutlass|xmma|sgemm|hgemm|gemv|cudnn|conv|implicit_convolve|wgrad|dgrad|"
    r"nchw|nhwc|splitK|Kernel2|dot_kernel|reduce_1Block",
    re.IGNORECASE,
)
# Namespaces whose operators are PyTorch's own compute (everything else is an extension's op).
TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "quantized", "_quantized", "rngprims"})
# Ops that move data to the host inside forward.
HOST_TRANSFER_OPS = frozenset({"_local_scalar_dense", "item", "_to_cpu"})
# Of those, the ones that read one scalar (Policy.allow_model_scalar_reads).
SCALAR_READ_OPS = frozenset({"_local_scalar_dense", "item"})
# Operators whose use means lower precision than fp32 on an fp32 problem.
HALF_DTYPES = ("float16", "bfloat16", "float8")


@dataclass(frozen=True)
class Policy:
    name: str
    allow_torch_compute: bool  # permissive: PyTorch glue allowed
    allow_library_gemm: bool = True  # cuBLAS/cuDNN kernels for GEMM and convolution
    require_own_kernel: bool = True
    reject_lower_precision: bool = False  # fp16/bf16/TF32 on an fp32 problem is a violation
    reject_output_reuse: bool = False  # output storage overwritten by a later call is a violation
    # A scalar read (`.item()`, `float(t)`) of the model's own state (its parameters, buffers and
    # tensor attributes, or what forward computed from them alone) is not `host_compute`: it
    # reads a constant of the model (a scale passed to a kernel as a float, a one-time setup),
    # not part of the output's computation. Reads of anything computed from the inputs still are.
    allow_model_scalar_reads: bool = False
    allowed_ops: frozenset[str] = field(default=ALLOCATION_OPS | VIEW_OPS)

    def allows_op(self, namespace: str, op_name: str) -> bool:
        if namespace not in TORCH_NAMESPACES:
            return True  # the candidate's own extension or custom op
        if op_name in HOST_TRANSFER_OPS:
            return False
        return self.allow_torch_compute or op_name in self.allowed_ops


POLICIES = {
    "strict": Policy("strict", allow_torch_compute=False, reject_lower_precision=True, reject_output_reuse=True),
    "permissive": Policy("permissive", allow_torch_compute=True, allow_model_scalar_reads=True),
    # The reference given as its own candidate (experiments/identity_set.py) runs only
    # PyTorch's kernels: verdicts and speedups of the harness itself, which must read "passed, 1.00x".
    "calibration": Policy("calibration", allow_torch_compute=True, require_own_kernel=False,
                          allow_model_scalar_reads=True),
}
POLICY_NAMES = tuple(POLICIES)


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; use one of {sorted(POLICIES)}") from None
