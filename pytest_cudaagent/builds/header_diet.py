"""A candidate's CUDA source compiled with torch's tensor headers instead of all of torch.

Published KernelBench solutions open their `.cu` with `#include <torch/extension.h>`: torch's
whole C++ frontend (nn, optim, data, jit, serialize, autograd functions, ...) and its Python
bindings (pybind11, Python.h), for code that uses tensors, their factories, TORCH_CHECK and the
dispatch macros, all of which `torch/types.h` declares. nvcc parses what the source includes three
times (cudafe++, cicc, the host compiler after cudafe++), and the precompiled header cannot help
any of them. Measured with `nvcc -time` on a five-line kernel: 61 s with torch/extension.h, 23 s
with torch/types.h (README, "Builds").

Two levels (split_nvcc.py tries them in order): the lean copy, on ATen's Tensor, the dispatch
macros and the per-operator headers of the operators the source names (below: about half of
torch/types.h's compile, and torch/types.h sources get it too); then this one.
So the nvcc of a candidate's build (split_nvcc.py) first compiles a copy of the source whose
`#include <torch/extension.h>` (or torch/torch.h, torch/all.h) line reads `#include
<torch/types.h>`, then, if that fails for any reason, the source as written, reporting only that
compile's output: a source that needs what was left out builds as before, its errors as before.

Why a source that compiles both ways means the same both ways: what is left out lives in its own
namespaces (torch::nn, torch::optim, torch::jit, torch::autograd's functions, torch::cuda, py::,
...), so a call into it fails to compile instead of finding another overload; the names
torch/utils.h adds to `torch::` are at::'s own (using-declarations). What could still change
silently is the preprocessor, so the copy is not used when the source tests a macro it does not
define itself (`#if`/`#ifdef` of anything but compiler builtins and torch's version, which the
copy includes), defines one before the torch include (a header left out could have redefined
it), or holds a raw string literal (the include line could be text). `#line` keeps every
diagnostic, `__FILE__` and debug line pointing at the source as written. Stdlib only: imported by
split_nvcc.py run as a file.
"""

from __future__ import annotations

import os
import re

# Set to "1" in the environment of the nvcc wrapper (split_nvcc.py) to compile dieted copies.
ENV = "CUDAAGENT_HEADER_DIET"
# "0" there: no lean copy (EvalConfig.header_diet_lean off), only the one on torch/types.h.
LEAN_ENV = "CUDAAGENT_HEADER_DIET_LEAN"
FULL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/(extension|torch|all)\.h[>"][ \t]*(//.*)?$', re.M)
LIGHT_INCLUDE = "#include <torch/types.h>"
# Only macros, and what a source may test in an #if (TORCH_VERSION_MAJOR, ...): included first.
VERSION_INCLUDE = "#include <torch/version.h>"
# The APIs torch/extension.h has and torch/types.h has not. A source naming one is compiled as
# written without trying the copy first (the copy would fail: a wasted compile). The namespaces
# are also looked for unqualified under `using namespace torch`; the rest only after `torch::`
# (`cuda::` alone is also libcu++'s, the functions' names are common words).
LEFT_OUT_NAMESPACES = ("nn", "optim", "data", "jit", "serialize", "autograd", "fft", "linalg", "special", "nested",
                       "python", "enumtype")
LEFT_OUT_QUALIFIED_ONLY = ("cuda", "sparse", "mps", "xpu", "nativert", "save", "load", "equal_if_defined")
LEFT_OUT_API = re.compile(
    r"\b(py|pybind11)::|\bPYBIND11_|\bPy_\w+|\bPy([A-Z][A-Za-z]*_\w+|[A-Za-z]*Object)\b|\bTHP\w+"
    rf"|\btorch::({'|'.join(LEFT_OUT_NAMESPACES + LEFT_OUT_QUALIFIED_ONLY)})\b")
USING_TORCH = re.compile(r"\busing\s+namespace\s+torch\s*;")
UNQUALIFIED_LEFT_OUT = re.compile(rf"(?<![\w:])({'|'.join(LEFT_OUT_NAMESPACES)})::")
RAW_STRING = re.compile(r'(?<![\w])(u8|u|U|L)?R"')
CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef)\b(.*)$", re.M)
DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
# Words an #if may hold whatever the headers: operators of the preprocessor, compiler builtins
# (__CUDA_ARCH__, __CUDACC__, __GNUC__, __cplusplus, ...), torch's version (included first).
NEUTRAL_WORDS = {"defined", "__has_include", "__has_include_next", "__has_builtin", "__has_attribute",
                 "__has_cpp_attribute", "true", "false"}


# What the compiler and the command line define, the same for both builds: __CUDA_ARCH__,
# __GNUC__, __x86_64__, __cplusplus, the language's __cpp_* (not the library's __cpp_lib_*, nor
# headers' own __BSD_VISIBLE and the like, which the left-out headers' includes can define).
COMPILER_MACRO = re.compile(r"^(__\w+__|__cplusplus|__cpp_(?!lib_)\w+)$")
# Families of macros the left-out headers define (`g++ -dM -E` of torch/extension.h less
# torch/types.h: Python's pyconfig and API, pybind11, ATen/Config.h's build switches, the C++
# frontend's helpers, inttypes and stat names): a source that tests one is compiled as written even
# if it defines it itself, since `#ifndef X / #define X` would keep the header's X in one build
# and the source's in the other.
LEFT_OUT_MACRO = re.compile(r"^(HAVE_|Py|PY|SIZEOF_|ALIGNOF_|S_I|PRI|SCN|AT_|CO_|FUTURE_|METH_|WITH_|STATX_"
                            r"|PYBIND11_|THP|TORCH_(?!VERSION))")


def _neutral(word: str, own_macros: set[str]) -> bool:
    if LEFT_OUT_MACRO.match(word):
        return False
    return (word in NEUTRAL_WORDS or word in own_macros or COMPILER_MACRO.match(word) is not None
            or word.startswith("TORCH_VERSION"))


def why_not(text: str, include: re.Pattern = FULL_INCLUDE, left_out_api: re.Pattern = LEFT_OUT_API) -> str | None:
    """Why this CUDA source is compiled as written, not as a copy on torch/types.h; None: diet it.
    `include`: the lines the copy replaces (the lean copy also replaces torch/types.h);
    `left_out_api`: the names the copy does not declare (a binding's copy declares pybind's)."""
    first_include = include.search(text)
    if first_include is None:
        return ("no torch/extension.h, torch/torch.h or torch/all.h include" if include is FULL_INCLUDE
                else "no torch include (torch/extension.h, torch.h, all.h, types.h)")
    if RAW_STRING.search(text):
        return "a raw string literal (an include line could be text)"
    left_out = left_out_api.search(text)
    if left_out is None and USING_TORCH.search(text):
        left_out = UNQUALIFIED_LEFT_OUT.search(text)
    if left_out is not None:
        return f"names {left_out.group(0)!r}, which torch/types.h does not declare"
    defined_before = [match.group(1) for match in DEFINE.finditer(text, 0, first_include.start())]
    if defined_before:
        return f"defines {defined_before[0]} before the torch include"
    own_macros = {match.group(1) for match in DEFINE.finditer(text)}
    for conditional in CONDITIONAL.finditer(text):
        condition = re.sub(r"//.*|/\*.*?\*/", "", conditional.group(2))
        condition = re.sub(r"<[^>]*>|\"[^\"]*\"", "", condition)  # __has_include(<torch/nn.h>)
        foreign = [word for word in IDENTIFIER.findall(condition) if not _neutral(word, own_macros)]
        if foreign:
            return f"#{conditional.group(1)} tests {foreign[0]}, which a header left out could define"
    return None


def dieted(text: str, original_path: str) -> str:
    """The copy: torch's version macros, then the source as written (line for line, named as the
    original by #line) with its full torch includes reading torch/types.h."""
    return _named_copy(original_path) + FULL_INCLUDE.sub(LIGHT_INCLUDE, text)


def line_directive(line: int, original_path: str) -> str:
    """`#line` naming the source as written (a C string: backslashes and quotes escaped)."""
    quoted = original_path.replace("\\", "\\\\").replace('"', '\\"')
    return f'#line {line} "{quoted}"'


def _named_copy(original_path: str) -> str:
    return f"{VERSION_INCLUDE}\n{line_directive(1, original_path)}\n"


# -- the lean copy: ATen's Tensor, the dispatch macros and the operators the source names -------
#
# torch/types.h is ATen/ATen.h (every operator's declaration, ~2,400 headers) and autograd's
# factories; a kernel's host code needs the Tensor class, TORCH_CHECK, the AT_DISPATCH macros and
# the few operators it calls. `nvcc -time` on a small kernel (2-core box, -O3, sm_90): 17.0 s on
# torch/types.h, 9.1 s on ATen/core/Tensor.h + ATen/Dispatch.h + ATen/ops/empty_like.h (README,
# "Builds"). What is included is a subset of what torch/types.h includes, so a name the source
# needs and the copy lacks fails to compile (and the next copy, or the source, is compiled); the
# rules below keep what could change silently out: every qualified name must be a type or
# constant the lean headers declare, or an operator whose header (all its overloads) is
# included; a name the source mentions that is an operator gets its header whether qualified or
# not (overloads found by argument-dependent lookup are then all there); no using-directive of
# torch, at or c10 (unqualified lookup would search what was left out); nothing autograd's
# factories treat differently from ATen's (`requires_grad`), no TORCH_LIBRARY registration.
ANY_TORCH_INCLUDE = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/(extension|torch|all|types)\.h[>"][ \t]*(//.*)?$', re.M)
LEAN_HEADERS = ("ATen/core/Tensor.h", "ATen/Dispatch.h")
# torch::X reads at::X in the copy, as it does under torch/types.h for every name torch does not
# declare itself; the names it does declare (autograd's factories: torch::empty, ...) call at::X
# and only differ in requires_grad, which refuses the copy.
LEAN_TORCH_NAMESPACE = "namespace torch { using namespace at; }"
# torch/types.h's own dtype names (torch::kFloat32 is at::kFloat): declared in the copy the way
# torch/types.h declares them, for those the source names.
TORCH_DTYPE_ALIASES = {
    "kUInt8": "kByte", "kInt8": "kChar", "kInt16": "kShort", "kInt32": "kInt", "kInt64": "kLong",
    "kFloat16": "kHalf", "kFloat32": "kFloat", "kFloat64": "kDouble", "kU8": "kByte", "kI8": "kChar",
    "kI16": "kShort", "kI32": "kInt", "kI64": "kLong", "kF16": "kHalf", "kF32": "kFloat", "kF64": "kDouble",
}
LEAN_REFUSED = re.compile(r"requires_grad|\bTORCH_LIBRARY\w*|\bVariable\b|\bset_grad_enabled\b"
                          r"|\busing\s+namespace\s+(torch|at|c10)\b")
QUALIFIED = re.compile(r"(?<![\w:])(torch|at|c10)::([A-Za-z_]\w*)")
# Types and constants of ATen/core/Tensor.h's own includes (c10's, which at:: and torch:: see).
LEAN_NAMES = frozenset({
    "Tensor", "TensorBase", "TensorOptions", "ScalarType", "Scalar", "IntArrayRef", "ArrayRef",
    "OptionalIntArrayRef", "SymInt", "SymIntArrayRef", "Device", "DeviceType", "Layout", "MemoryFormat",
    "Half", "BFloat16", "Float8_e4m3fn", "Float8_e5m2", "complex", "optional", "nullopt", "irange",
    "TensorAccessor", "PackedTensorAccessor32", "PackedTensorAccessor64", "GenericPackedTensorAccessor",
    "RestrictPtrTraits", "DefaultPtrTraits", "kFloat", "kDouble", "kHalf", "kBFloat16", "kInt", "kLong",
    "kShort", "kChar", "kByte", "kBool", "kComplexFloat", "kComplexDouble", "kFloat8_e4m3fn",
    "kFloat8_e5m2", "kCUDA", "kCPU", "kStrided", "kContiguous", "elementSize", "toString", "typeMetaToScalarType",
    "cuda",  # at::cuda, c10::cuda: the source's own CUDA includes declare them, in either copy
})
OPS_NAME = re.compile(r"^(\w+?)(_outf|_out)?$")


def _aten_dir(include_dirs: list[str]) -> str | None:
    """The ATen of the first include directory with ATen's per-operator headers."""
    return next((os.path.join(directory, "ATen") for directory in include_dirs
                 if os.path.isdir(os.path.join(directory, "ATen", "ops"))), None)


def ops_names(include_dirs: list[str]) -> frozenset[str]:
    """The operators of that ATen (`ATen/ops/<name>.h`, each beside its `<name>_ops.h`)."""
    aten = _aten_dir(include_dirs)
    if aten is None:
        return frozenset()
    files = set(os.listdir(os.path.join(aten, "ops")))
    return frozenset(name[:-2] for name in files if name.endswith(".h") and f"{name[:-2]}_ops.h" in files)


# ATen/Functions.h (in torch/types.h, not in the lean copy) defines overloads of its own for some
# names: at::var(const Tensor&, int dim) beside ops/var.h's var(const Tensor&, bool unbiased),
# so without it `at::var(x, 1)` would silently take the other overload. A source that calls any
# of them as a function (qualified or not; a method call is the Tensor's own) gets no lean copy.
FUNCTIONS_H_DEFINITION = re.compile(r"^inline\s[^;{(=]*?\b(\w+)\s*\(", re.M)


def functions_h_overloads(include_dirs: list[str]) -> frozenset[str]:
    """The functions ATen/Functions.h defines itself, beside the per-operator headers it includes."""
    aten = _aten_dir(include_dirs)
    if aten is None:
        return frozenset()
    try:
        with open(os.path.join(aten, "Functions.h"), encoding="utf-8") as file:
            return frozenset(FUNCTIONS_H_DEFINITION.findall(file.read()))
    except OSError:
        return frozenset()


def _free_call(names: frozenset[str], text: str) -> str | None:
    """The first of `names` the source calls as a function rather than a method."""
    if not names:
        return None
    call = re.compile(rf"(?<![\w.>:])((?:at|torch)::)?({'|'.join(sorted(names))})\s*\(")
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)  # "stride (int)" in a comment is no call
    found = call.search(code)
    return found.group(0).rstrip("( \t") if found else None


def _operator(name: str, ops: frozenset[str]) -> str | None:
    """The operator header `name` is declared in (add_out is add's), if any."""
    if name in ops:
        return name
    match = OPS_NAME.match(name)
    return match.group(1) if match and match.group(1) in ops else None


def lean_why_not(text: str, ops: frozenset[str], overloaded: frozenset[str] = frozenset(),
                 left_out_api: re.Pattern = LEFT_OUT_API, allowed: frozenset[str] = frozenset()) -> str | None:
    """Why no lean copy of this source is tried (None: try it first). `overloaded`: the names
    ATen/Functions.h defines overloads of itself (functions_h_overloads); `allowed`: names of
    `torch::` the copy declares by headers of its own (BINDING_EXTRA_NAMES)."""
    if not ops:
        return "no ATen/ops headers on the include path"
    reason = why_not(text, ANY_TORCH_INCLUDE, left_out_api)
    if reason:
        return reason
    refused = LEAN_REFUSED.search(text)
    if refused:
        return f"names {refused.group(0)!r}"
    called = _free_call(overloaded, text)
    if called:
        return f"calls {called}, which ATen/Functions.h overloads beside its operator header"
    for namespace, name in QUALIFIED.findall(text):
        if namespace == "torch" and name in TORCH_DTYPE_ALIASES:
            continue
        if name not in LEAN_NAMES and name not in allowed and _operator(name, ops) is None:
            return f"names {namespace}::{name}, which the lean headers do not declare"
    return None


def leaned(text: str, original_path: str, ops: frozenset[str], extra_headers: tuple[str, ...] = ()) -> str:
    """The lean copy: each torch include line becomes the lean headers and the operators the
    source names (then `extra_headers`), then a #line that puts the next line back at its own
    number."""
    named = sorted({header for word in set(IDENTIFIER.findall(text)) if (header := _operator(word, ops))})
    includes = [*LEAN_HEADERS, *(f"ATen/ops/{name}.h" for name in named), *extra_headers]
    aliases = sorted({name for namespace, name in QUALIFIED.findall(text)
                      if namespace == "torch" and name in TORCH_DTYPE_ALIASES})
    torch_namespace = LEAN_TORCH_NAMESPACE.replace(
        " }", "".join(f" constexpr auto {name} = at::{TORCH_DTYPE_ALIASES[name]};" for name in aliases) + " }")

    def block(match: re.Match) -> str:
        line = text.count("\n", 0, match.start()) + 1
        lines = [f"#include <{header}>" for header in includes]
        return "\n".join([*lines, torch_namespace, line_directive(line + 1, original_path)])

    return _named_copy(original_path) + ANY_TORCH_INCLUDE.sub(block, text)


# -- the binding's lean copy: the lean headers and torch's pybind, for a binding split off its .cu
#
# A binding (binding_split.py: declarations of the source's functions and its PYBIND11_MODULE
# block) compiled in load_inline's main.cpp included all of torch/extension.h, through the shared
# precompiled header of it: on the 2-core box 9.7-10.7 CPU s for one published-style binding at
# -O3 with that PCH (760 MB to load), 19.2 without one, 5.4-5.8 on the lean headers and
# torch/csrc/utils/pybind.h with no PCH at all (2026-11-27, docs/builds.md). What torch/extension.h adds to
# pybind.h's includes (torch/all.h's C++ frontend, torch/python.h) declares no pybind11 type
# caster, so each argument the module converts converts the same way; the rest is the lean
# copy's rules (a name the copy lacks fails to compile; one that could resolve otherwise refuses
# the copy), with pybind's and Python's own names allowed, since pybind.h declares them all.
BINDING_HEADER = "torch/csrc/utils/pybind.h"
# What every lean binding opens with, in its order (_named_copy's version header, then leaned's):
# the shared precompiled header of the lean binding (fast_build.py) holds these; the operators a
# binding names are then parsed after them rather than before pybind.h.
LEAN_BINDING_HEADERS = (VERSION_INCLUDE.split("<")[1].rstrip(">"), *LEAN_HEADERS, BINDING_HEADER)
BINDING_LEFT_OUT_API = re.compile(rf"\bTHP\w+|\btorch::({'|'.join(LEFT_OUT_NAMESPACES + LEFT_OUT_QUALIFIED_ONLY)})\b")


# load_inline's own main.cpp (functions=[...]) wraps each function it binds in
# torch::wrap_pybind_function (with_pytorch_error_handling, the default), which torch/extension.h
# declares through torch/csrc/Exceptions.h and pybind.h does not: a lean copy naming it includes
# that header too (some 470 preprocessed lines past pybind.h's 180,000).
BINDING_EXTRA_NAMES = {"wrap_pybind_function": "torch/csrc/Exceptions.h"}


def lean_binding(binding: str, original_path: str, include_dirs: list[str]) -> tuple[str | None, str | None]:
    """(the binding's lean copy, None) or (None, why it is compiled on torch/extension.h)."""
    ops = ops_names(include_dirs)
    reason = lean_why_not(binding, ops, functions_h_overloads(include_dirs), BINDING_LEFT_OUT_API,
                          frozenset(BINDING_EXTRA_NAMES))
    if reason:
        return None, reason
    extra = tuple(header for name, header in BINDING_EXTRA_NAMES.items() if re.search(rf"\btorch::{name}\b", binding))
    return leaned(binding, original_path, ops, (BINDING_HEADER, *extra)), None


def _include_dirs(argv: list[str]) -> list[str]:
    found = []
    for index, argument in enumerate(argv):
        if argument in ("-I", "-isystem") and index + 1 < len(argv):
            found.append(argv[index + 1])
        elif argument.startswith("-I") and len(argument) > 2:
            found.append(argument[2:])
    return found


def dieted_arguments(argv: list[str], lean: bool = True, text: str | None = None) -> list[tuple[str, list[str], str]] | str:
    """The copies to try in order, each as (level, nvcc's arguments compiling it, its path): the
    lean copy (`lean`), then the copy on torch/types.h; or why none. Each copy goes beside the
    object, as `<object>.<level>.cu` (the build directory, writable wherever the build is), with
    the source's own directory searched for its quoted includes. `text`: what the copies are made
    of instead of the source's own text (its kernels without its binding: binding_split.py)."""
    if argv.count("-c") != 1 or "-o" not in argv[:-1]:
        return "not one -c compile with -o"
    source_index = argv.index("-c") + 1
    if source_index >= len(argv) or not argv[source_index].endswith(".cu"):
        return "no .cu source after -c"
    source = argv[source_index]
    try:
        if text is None:
            with open(source, encoding="utf-8") as file:
                text = file.read()
    except (OSError, UnicodeDecodeError) as error:
        return f"unreadable source: {error}"
    original = os.path.abspath(source)
    copies, reasons = [], []
    if lean:
        include_dirs = _include_dirs(argv)
        ops = ops_names(include_dirs)
        reason = lean_why_not(text, ops, functions_h_overloads(include_dirs))
        if reason:
            reasons.append(f"lean: {reason}")
        else:
            copies.append(("lean", leaned(text, original, ops)))
    reason = why_not(text)
    if reason:
        reasons.append(reason)
    else:
        copies.append(("diet", dieted(text, original)))
    if not copies:
        return "; ".join(reasons)
    output = argv[argv.index("-o") + 1]
    source_dir = os.path.dirname(original)
    attempts = []
    for level, content in copies:
        # Named after the object, which is this compile's own (two sources of one stem in one
        # build would share a name derived from the source).
        copy = f"{os.path.abspath(output)}.{level}.cu"
        try:
            with open(copy, "w", encoding="utf-8") as file:
                file.write(content)
        except OSError as error:
            return f"cannot write the copy: {error}"
        arguments = list(argv)
        arguments[source_index] = copy
        if os.path.dirname(copy) != source_dir:
            # The source's folder first for its quoted includes, as for the source itself (nvcc
            # passes -Xcompiler options to both of its preprocessing runs).
            arguments[source_index - 1:source_index - 1] = ["-Xcompiler", "-iquote", "-Xcompiler", source_dir]
        attempts.append((level, arguments, copy))
    return attempts
