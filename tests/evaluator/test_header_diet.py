"""header_diet.py: a CUDA source's torch include compiled as the lean headers (ATen's Tensor, the
dispatch macros, the operators it names), then as torch/types.h, as written when both fail or
could change what the source means; through the nvcc wrapper with real nvcc runs on tiny stand-in
headers (no GPU needed), and on torch's own headers."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cudaagent.builds import fast_build, header_diet, split_nvcc

NVCC = shutil.which("nvcc")
SCRIPT = Path(split_nvcc.__file__).resolve()

# Written the way published KernelBench solutions are: every one of these gets the diet.
PUBLISHED_STYLES = {
    "elementwise": r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::zeros_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
""",
    "dispatch, stream, checks": r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <vector>

#define CHECK_CUDA(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x)

template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, float s, int64_t n) {
#if __CUDA_ARCH__ >= 800
    for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = x[i] * s;
#endif
}

std::vector<torch::Tensor> forward(torch::Tensor x, double s) {
    CHECK_INPUT(x);
    const at::cuda::OptionalCUDAGuard guard(device_of(x));
    auto y = torch::empty({x.size(0), x.size(1)}, x.options().dtype(torch::kFloat32));
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "scale", ([&] {
        scale_kernel<scalar_t><<<1024, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), (float)s, x.numel());
    }));
    return {y, torch::matmul(y, y.t())};
}
""",
    "torch.h, using namespace, version test": r"""
// A PyTorch extension: CUDA kernel for a fused bias + GELU.
#include <torch/torch.h>
#include <cuda_fp16.h>
using namespace torch;
#ifndef TILE
#define TILE 32
#endif
#if defined(TORCH_VERSION_MAJOR) && TORCH_VERSION_MAJOR >= 2
#define HAS_NEW_API 1
#endif
__global__ void gelu(half* x, int n) { int i = threadIdx.x + blockIdx.x * TILE; if (i < n) x[i] = __float2half(0.f); }
Tensor gelu_cuda(Tensor x) { gelu<<<1, TILE>>>(reinterpret_cast<half*>(x.data_ptr<at::Half>()), x.numel()); return x; }
""",
}
# (a source, what the refusal names): each compiled as written, the copy never tried.
REFUSED = [
    ("#include <torch/types.h>\n__global__ void k() {}\n", "no torch/extension.h"),
    ("#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"f\", &f); }\n", "PYBIND11_"),
    ("#include <torch/extension.h>\nnamespace py = pybind11;\npy::object f();\n", "py::"),
    ("#include <torch/extension.h>\nPyObject* f();\n", "PyObject"),
    ("#include <torch/extension.h>\nvoid f() { Py_INCREF(nullptr); }\n", "Py_INCREF"),
    ("#include <torch/extension.h>\nauto f(torch::Tensor x) { return torch::nn::functional::relu(x); }\n", "torch::nn"),
    ("#include <torch/extension.h>\nusing namespace torch;\nauto f(Tensor x) { return nn::functional::relu(x); }\n",
     "nn::"),
    ("#include <torch/extension.h>\nvoid f() { torch::cuda::synchronize(); }\n", "torch::cuda"),
    ("#include <torch/extension.h>\nauto f(torch::Tensor x) { return torch::fft::fft(x); }\n", "torch::fft"),
    ("#include <torch/extension.h>\nconst char* s = R\"(\n#include <torch/extension.h>\n)\";\n", "raw string"),
    ("#include <torch/extension.h>\n#ifdef PYBIND11_VERSION_MAJOR\nint v = 1;\n#endif\n", "PYBIND11_"),
    ("#include <torch/extension.h>\n#if HAVE_UNISTD_H\nint v = 1;\n#endif\n", "HAVE_UNISTD_H"),
    ("#include <torch/extension.h>\n#if defined(Py_LIMITED_API) || X\nint v;\n#endif\n", "Py_LIMITED_API"),
    ("#define CHECK(x) x\n#include <torch/extension.h>\n", "defines CHECK before"),
    # Its own, but one the left-out headers define too (ATen/Config.h): kept in one build only.
    ("#include <torch/extension.h>\n#ifndef AT_MKL_ENABLED\n#define AT_MKL_ENABLED() 0\n#endif\n", "AT_MKL_ENABLED"),
    ("#include <torch/extension.h>\n#ifndef HAVE_UNISTD_H\n#define HAVE_UNISTD_H 1\n#endif\n", "HAVE_UNISTD_H"),
    # A library feature macro: set by whichever standard header was included, so by the left-out ones.
    ("#include <torch/extension.h>\n#ifdef __cpp_lib_filesystem\nint fs;\n#endif\n", "__cpp_lib_filesystem"),
]


@pytest.mark.parametrize("style", sorted(PUBLISHED_STYLES))
def test_sources_written_like_published_solutions_get_the_diet(style):
    assert header_diet.why_not(PUBLISHED_STYLES[style]) is None


@pytest.mark.parametrize(("source", "named"), REFUSED)
def test_a_source_the_copy_could_fail_or_change_is_compiled_as_written(source, named):
    reason = header_diet.why_not(source)
    assert reason is not None and named in reason, reason


# --- the lean copy ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def torch_ops() -> frozenset:
    from torch.utils import cpp_extension

    return header_diet.ops_names(cpp_extension.include_paths())


def test_torchs_operators_are_read_from_its_per_operator_headers(torch_ops):
    assert {"empty_like", "zeros_like", "matmul", "add", "empty"} <= torch_ops and len(torch_ops) > 1000
    assert "empty_like_ops" not in torch_ops and "Tensor" not in torch_ops
    assert header_diet._operator("add_out", torch_ops) == "add" and header_diet._operator("add_outf", torch_ops) == "add"
    assert header_diet.ops_names(["/nonexistent"]) == frozenset()


@pytest.mark.parametrize("style", ["elementwise", "dispatch, stream, checks"])
def test_published_styles_get_the_lean_copy_with_the_operators_they_name(style, torch_ops):
    source = PUBLISHED_STYLES[style]
    assert header_diet.lean_why_not(source, torch_ops) is None
    copy = header_diet.leaned(source, "/b/cuda.cu", torch_ops)
    assert "#include <ATen/core/Tensor.h>" in copy and "#include <ATen/Dispatch.h>" in copy
    assert "torch/extension.h" not in copy and "torch/types.h" not in copy
    named = {"elementwise": ["zeros_like"], "dispatch, stream, checks": ["empty", "matmul"]}[style]
    assert all(f"#include <ATen/ops/{name}.h>" in copy for name in named)


def test_a_source_on_torch_types_h_gets_the_lean_copy_but_not_the_types_h_one(torch_ops):
    source = "#include <torch/types.h>\nat::Tensor f(at::Tensor x) { return at::sum(x, 0); }\n"
    assert header_diet.lean_why_not(source, torch_ops) is None and header_diet.why_not(source) is not None
    assert "#include <ATen/ops/sum.h>" in header_diet.leaned(source, "/k.cu", torch_ops)


def test_operators_named_unqualified_get_their_headers_too(torch_ops):
    """Argument-dependent lookup finds at::relu from relu(x): its header (all its overloads) is in."""
    source = "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return relu(x); }\n"
    assert "#include <ATen/ops/relu.h>" in header_diet.leaned(source, "/k.cu", torch_ops)


def test_torchs_own_dtype_names_are_declared_as_torch_types_h_declares_them(torch_ops):
    source = "#include <torch/extension.h>\nauto f(torch::Tensor x) { return x.to(torch::kFloat32); }\n"
    assert header_diet.lean_why_not(source, torch_ops) is None
    copy = header_diet.leaned(source, "/k.cu", torch_ops)
    assert "namespace torch { using namespace at; constexpr auto kFloat32 = at::kFloat; }" in copy
    types_h = Path(next(p for p in __import__("torch.utils.cpp_extension").utils.cpp_extension.include_paths()
                        if p.endswith("api/include"))) / "torch" / "types.h"
    assert "constexpr auto kFloat32 = at::kFloat;" in types_h.read_text()


def test_every_dtype_alias_the_lean_copy_declares_is_the_one_torch_types_h_declares():
    """The lean copy's torch::kFloat32 and the like are a list kept here: each must name the
    ScalarType torch/types.h's does (following its aliases of aliases, kU8 = kUInt8)."""
    from torch.utils import cpp_extension

    types_h = next(Path(p) / "torch" / "types.h" for p in cpp_extension.include_paths()
                   if (Path(p) / "torch" / "types.h").exists()).read_text()
    declared = dict(re.findall(r"constexpr auto (k\w+) = (?:at::)?(k\w+);", types_h))

    def resolve(name: str) -> str:
        return resolve(declared[name]) if name in declared else name

    assert header_diet.TORCH_DTYPE_ALIASES.keys() <= declared.keys()
    for alias, scalar in header_diet.TORCH_DTYPE_ALIASES.items():
        assert resolve(alias) == scalar, alias


@pytest.mark.parametrize("include_line", [1, 3])
def test_the_lean_copy_puts_the_line_after_the_include_back_at_its_number(include_line, torch_ops):
    lines = ["// x"] * (include_line - 1) + ["#include <torch/extension.h>", "int after = 1;"]
    copy = header_diet.leaned("\n".join(lines) + "\n", '/d "q"/cuda.cu', torch_ops).splitlines()
    assert copy[:2] == ["#include <torch/version.h>", '#line 1 "/d \\"q\\"/cuda.cu"']
    assert copy[-2:] == [f'#line {include_line + 1} "/d \\"q\\"/cuda.cu"', "int after = 1;"]


LEAN_REFUSED = [
    ("#include <torch/extension.h>\nauto f(torch::Tensor x) { return x.set_requires_grad(true); }\n",
     "requires_grad"),
    ("#include <torch/extension.h>\nauto f(torch::Tensor x) { return torch::empty({1}, "
     "torch::TensorOptions().requires_grad(true)); }\n", "requires_grad"),
    ("#include <torch/extension.h>\nusing namespace at;\nTensor f(Tensor x) { return x; }\n", "using namespace at"),
    ("#include <torch/types.h>\nusing namespace c10;\n", "using namespace c10"),
    ("#include <torch/extension.h>\nauto f(torch::Tensor x) { return at::native::relu(x); }\n", "at::native"),
    ("#include <torch/extension.h>\nauto f() { return torch::tensor({1, 2}); }\n", "torch::tensor"),
    ("#include <torch/extension.h>\nTORCH_LIBRARY(my_ops, m) { m.def(\"f\", f); }\n", "TORCH_LIBRARY"),
    ("#include <torch/extension.h>\ntorch::autograd::Variable f();\n", "torch::autograd"),
    ("#include <torch/types.h>\nconst char* s = R\"(x)\";\n", "raw string"),
    ("#include <torch/types.h>\n#ifdef AT_CUDNN_ENABLED\nint v;\n#endif\n", "AT_CUDNN_ENABLED"),
    ("#include <cuda_runtime.h>\n__global__ void k() {}\n", "no torch include"),
]


@pytest.mark.parametrize(("source", "named"), LEAN_REFUSED)
def test_a_source_the_lean_copy_could_change_gets_none(source, named, torch_ops):
    reason = header_diet.lean_why_not(source, torch_ops)
    assert reason is not None and named in reason, reason


@pytest.fixture(scope="module")
def functions_h() -> frozenset:
    from torch.utils import cpp_extension

    return header_diet.functions_h_overloads(cpp_extension.include_paths())


def test_the_overloads_atens_functions_h_defines_itself_are_read_from_it(functions_h):
    assert {"var", "std", "var_mean", "std_mean", "numel", "size", "stride"} <= functions_h
    assert "empty" not in functions_h and header_diet.functions_h_overloads(["/nonexistent"]) == frozenset()


@pytest.mark.parametrize("call", ["at::var(x, 1)", "torch::std(x, 1)", "at::std_mean(x, 0)", "size(x, 0) + 1"])
def test_a_call_of_an_overload_only_functions_h_has_gets_no_lean_copy(call, torch_ops, functions_h):
    """at::var(x, 1) is Functions.h's var(const Tensor&, int dim); without it ops/var.h's
    var(const Tensor&, bool unbiased) would take the call: a different answer, silently."""
    source = f"#include <torch/extension.h>\nauto f(torch::Tensor x) {{ return {call}; }}\n"
    reason = header_diet.lean_why_not(source, torch_ops, functions_h)
    assert reason is not None and "Functions.h" in reason, reason


def test_methods_of_the_same_names_and_words_in_comments_keep_the_lean_copy(torch_ops, functions_h):
    source = ("#include <torch/extension.h>\n// stride (int): the step\n/* var (float) */\n"
              "auto f(torch::Tensor x) { return x.var(1).size(0) + x.stride(0) + std::size(\"ab\"); }\n")
    assert header_diet.lean_why_not(source, torch_ops, functions_h) is None


def test_no_lean_copy_without_atens_operator_headers_on_the_include_path():
    assert "no ATen/ops" in header_diet.lean_why_not(PUBLISHED_STYLES["elementwise"], frozenset())


@pytest.mark.parametrize("include", ['#include <torch/extension.h>', '#include "torch/extension.h"',
                                     '  #  include <torch/torch.h>', '#include <torch/all.h>  // all of it'])
def test_the_copy_keeps_every_line_where_it_was_and_names_the_original(include):
    source = f"// a kernel\n{include}\n#include <vector>\nint x = 1;\n"
    copy = header_diet.dieted(source, '/build/dir "q"/cuda.cu').splitlines()
    assert copy[:2] == ["#include <torch/version.h>", '#line 1 "/build/dir \\"q\\"/cuda.cu"']
    assert copy[2:] == ["// a kernel", "#include <torch/types.h>", "#include <vector>", "int x = 1;"]


def test_comments_that_say_pytorch_and_torchs_own_dtypes_do_not_refuse_the_diet():
    source = "// PyTorch extension, Python bindings elsewhere\n#include <torch/extension.h>\n" \
             "auto f(torch::Tensor x) { return x.to(torch::kFloat32).to(torch::kCUDA); }\n"
    assert header_diet.why_not(source) is None


def test_arguments_point_nvcc_at_the_copy_beside_the_object(tmp_path):
    source = tmp_path / "src" / "kernel.cu"
    source.parent.mkdir()
    source.write_text(PUBLISHED_STYLES["elementwise"])
    argv = ["--generate-dependencies-with-compile", "--dependency-output", "out/k.o.d", "-O3", "-c", str(source),
            "-o", str(tmp_path / "out" / "k.o"), "-std=c++17"]
    (tmp_path / "out").mkdir()
    [(level, arguments, copy)] = header_diet.dieted_arguments(argv)  # no ATen/ops on the path: no lean copy
    assert level == "diet" and copy == str(tmp_path / "out" / "k.o.diet.cu") and Path(copy).exists()
    assert arguments == [*argv[:4], "-Xcompiler", "-iquote", "-Xcompiler", str(source.parent), "-c", copy, *argv[6:]]
    # Beside its source (load_inline's case: one build folder), no extra search path.
    [(_, arguments, copy)] = header_diet.dieted_arguments(["-c", str(source), "-o", str(source.parent / "k.o")])
    assert arguments == ["-c", copy, "-o", str(source.parent / "k.o")]


def test_two_sources_of_one_stem_in_one_build_get_two_copies(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "k.cu").write_text(PUBLISHED_STYLES["elementwise"].replace("relu", f"relu_{folder}"))
    copies = [header_diet.dieted_arguments(["-c", str(tmp_path / folder / "k.cu"), "-o", str(tmp_path / f"{folder}.o")])[0][2]
              for folder in ("a", "b")]
    assert copies[0] != copies[1] and "relu_a" in Path(copies[0]).read_text() and "relu_b" in Path(copies[1]).read_text()


@pytest.mark.parametrize("argv", [["-c", "k.cpp", "-o", "k.o"], ["-E", "k.cu"], ["-c", "missing.cu", "-o", "k.o"]])
def test_anything_but_one_readable_cu_compile_is_left_alone(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert isinstance(header_diet.dieted_arguments(argv), str)


# --- the nvcc wrapper, with real nvcc runs on stand-in torch headers -------------------------

STAND_INS = {
    # What the lean copy includes: a subset of torch/types.h, as in torch.
    "ATen/core/Tensor.h": "#pragma once\nstruct Tensor { int n; };\nnamespace at {}\n",
    "ATen/Dispatch.h": "#pragma once\n",
    "ATen/ops/twice.h": "#pragma once\n#include <ATen/ops/twice_ops.h>\ninline int twice(Tensor t) { return 2 * t.n; }\n",
    "ATen/ops/twice_ops.h": "#pragma once\n",
    "torch/types.h": "#pragma once\n#include <ATen/core/Tensor.h>\n#include <ATen/Dispatch.h>\n#include <ATen/ops/twice.h>\n"
                     "struct OnlyInTypes {};\n",
    "torch/version.h": "#pragma once\n#define TORCH_VERSION_MAJOR 2\n",
    "torch/extension.h": "#pragma once\n#include <torch/types.h>\nstruct OnlyInTheFullHeader {};\n",
}
USES_TYPES_ONLY = r"""#include <torch/extension.h>
__global__ void k(float* x) { x[threadIdx.x] = 1.f; }
const char* where_i_am = __FILE__;
int launch(Tensor t) { int unused; k<<<1, 32>>>(nullptr); return t.n; }
"""


def stand_in_headers(root: Path) -> Path:
    include = root / "include"
    for name, text in STAND_INS.items():
        (include / name).parent.mkdir(parents=True, exist_ok=True)
        (include / name).write_text(text)
    return include


def wrapper(tmp_path: Path, source: str, diet: bool, name: str = "kernel", extra: tuple = (), lean: bool = True) -> dict:
    """One -c compile through split_nvcc.py: its exit status, output, log line, object."""
    (tmp_path / f"{name}.cu").write_text(source)
    log = tmp_path / f"{name}-{diet}.jsonl"
    output = tmp_path / f"{name}-{diet}.o"
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "-I", str(stand_in_headers(tmp_path)), *extra, "-Xcompiler", "-Wall",
         "-c", str(tmp_path / f"{name}.cu"), "-o", str(output)],
        cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, split_nvcc.LOG_ENV: str(log), header_diet.ENV: "1" if diet else "0",
             header_diet.LEAN_ENV: "1" if lean else "0", split_nvcc.SPLIT_WHEN_BUSY_ENV: "1"})
    return {"returncode": completed.returncode, "stdout": completed.stdout, "stderr": completed.stderr,
            "log": json.loads(log.read_text().splitlines()[-1]), "object": output.read_bytes() if output.exists() else None}


needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


@needs_nvcc
@pytest.mark.parametrize("lean", [True, False])
def test_a_source_that_needs_only_tensors_compiles_the_copy_and_still_names_itself(tmp_path, lean):
    run = wrapper(tmp_path, USES_TYPES_ONLY, diet=True, lean=lean)
    level = "lean" if lean else "diet"
    assert run["returncode"] == 0 and run["log"]["diet"] == "used" and run["log"]["path"] == "split"
    assert run["log"]["diet_level"] == level and "diet_failed" not in run["log"]
    assert (tmp_path / f"kernel-True.o.{level}.cu").exists()
    # Diagnostics and __FILE__ name the source as written (line 4 there), never the copy.
    assert f"{tmp_path / 'kernel.cu'}(4)" in run["stderr"] or f"{tmp_path / 'kernel.cu'}:4" in run["stderr"]
    assert "diet" not in run["stderr"]
    # (nvcc's own temporary file names, which carry the copy's, aside)
    strings = re.sub(rb"tmpxft_[\w.-]+?\.cudafe1\.cpp", b"", run["object"])
    assert str(tmp_path / "kernel.cu").encode() in strings and b"diet" not in strings and b"lean" not in strings


@needs_nvcc
def test_the_lean_copy_keeps_lines_after_the_headers_it_puts_in_the_include_line(tmp_path):
    """The include on line 3 becomes several lines; a #line puts line 4 back at 4."""
    source = "// two lines\n// before\n#include <torch/types.h>\nint use(Tensor t) { return twice(t); }\n" \
             "__global__ void k(float* x) { x[0] = 1.f; }\nint launch(Tensor t) { int unused; k<<<1, 1>>>(nullptr); return t.n; }\n"
    run = wrapper(tmp_path, source, diet=True)
    assert run["returncode"] == 0 and run["log"]["diet_level"] == "lean"
    copy = (tmp_path / "kernel-True.o.lean.cu").read_text()
    assert "#include <ATen/ops/twice.h>" in copy and "torch/types.h" not in copy
    assert f"{tmp_path / 'kernel.cu'}(6)" in run["stderr"] or f"{tmp_path / 'kernel.cu'}:6" in run["stderr"]


@needs_nvcc
def test_a_source_that_needs_more_than_the_lean_headers_fails_that_copy_quietly_and_takes_types_h(tmp_path):
    run = wrapper(tmp_path, USES_TYPES_ONLY + "OnlyInTypes needs_it;\n", diet=True)
    assert run["returncode"] == 0 and run["log"]["diet"] == "used" and run["log"]["diet_level"] == "diet"
    assert [attempt["level"] for attempt in run["log"]["diet_failed"]] == ["lean"]
    assert "OnlyInTypes" not in run["stderr"] and not list(tmp_path.glob("*.lean.cu"))


@needs_nvcc
def test_a_source_that_needs_the_full_header_fails_the_copy_quietly_and_builds_as_written(tmp_path):
    source = USES_TYPES_ONLY + "OnlyInTheFullHeader needs_it;\n"
    run = wrapper(tmp_path, source, diet=True)
    assert run["returncode"] == 0 and run["object"] is not None
    assert run["log"]["diet"].startswith("every copy failed") and run["log"]["path"] == "split"
    assert [attempt["level"] for attempt in run["log"]["diet_failed"]] == ["lean", "diet"]
    assert "OnlyInTheFullHeader" not in run["stderr"] and not list(tmp_path.glob("*.diet.cu"))
    assert not list(tmp_path.glob("*.lean.cu"))


@needs_nvcc
def test_a_broken_source_reports_exactly_what_it_reports_without_the_diet(tmp_path):
    broken = USES_TYPES_ONLY + "int broken() { return undeclared_name; }\n"
    with_diet, without = wrapper(tmp_path, broken, diet=True), wrapper(tmp_path, broken, diet=False)
    assert with_diet["returncode"] == without["returncode"] != 0
    assert with_diet["stderr"] == without["stderr"] and "undeclared_name" in without["stderr"]
    assert "diet" not in without["log"] and "failed" in with_diet["log"]["diet"]


@needs_nvcc
def test_quoted_includes_are_found_beside_the_source_when_the_object_goes_elsewhere(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "helpers.cuh").write_text("__device__ inline float twice(float v) { return 2 * v; }\n")
    source = "#include <torch/extension.h>\n#include \"helpers.cuh\"\n" \
             "__global__ void k(float* x) { x[0] = twice(x[0]); }\n"
    (tmp_path / "src" / "kernel.cu").write_text(source)
    (tmp_path / "out").mkdir()
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "-I", str(stand_in_headers(tmp_path)), "-c", "src/kernel.cu", "-o", "out/k.o"],
        cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, split_nvcc.LOG_ENV: str(tmp_path / "log.jsonl"), header_diet.ENV: "1"})
    assert completed.returncode == 0, completed.stderr
    assert json.loads((tmp_path / "log.jsonl").read_text())["diet"] == "used"
    assert (tmp_path / "out" / "k.o.lean.cu").exists()


@needs_nvcc
def test_split_off_still_diets_through_nvccs_own_sequence(tmp_path, monkeypatch):
    monkeypatch.setenv(split_nvcc.SPLIT_ENV, "0")
    run = wrapper(tmp_path, USES_TYPES_ONLY, diet=True)
    assert run["returncode"] == 0 and run["log"]["diet"] == "used"
    assert run["log"]["path"] == "nvcc" and "split off" in run["log"]["reason"]


@needs_nvcc
@pytest.mark.parametrize(("split", "diet", "wrapped", "split_env", "diet_env"),
                         [(False, False, False, None, None), (True, False, True, "1", "0"),
                          (False, True, True, "0", "1"), (True, True, True, "1", "1")])
def test_the_evaluation_config_chooses_the_wrapper_and_what_it_does(monkeypatch, nvcc_environment, split, diet,
                                                                     wrapped, split_env, diet_env):
    from torch.utils import cpp_extension

    from pytest_cudaagent.core.config import EvalConfig

    assert EvalConfig().header_diet and not EvalConfig.from_dict({"header_diet": False}).header_diet
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(Path(NVCC).resolve().parents[1]))
    monkeypatch.setattr(cpp_extension, "_jit_compile", cpp_extension._jit_compile)  # install wraps it: undone after
    fast_build.install(None, split=split, diet=diet)
    assert ("split_nvcc.py" in os.environ.get("PYTORCH_NVCC", "")) == wrapped
    assert os.environ.get(split_nvcc.SPLIT_ENV) == split_env and os.environ.get(header_diet.ENV) == diet_env
    assert os.environ.get(header_diet.LEAN_ENV) == ("1" if wrapped else None)


@needs_nvcc
def test_the_evaluation_config_can_leave_the_lean_copy_out(monkeypatch, nvcc_environment):
    from torch.utils import cpp_extension

    from pytest_cudaagent.core.config import EvalConfig

    assert EvalConfig().header_diet_lean and not EvalConfig.from_dict({"header_diet_lean": False}).header_diet_lean
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(Path(NVCC).resolve().parents[1]))
    monkeypatch.setattr(cpp_extension, "_jit_compile", cpp_extension._jit_compile)
    fast_build.install(None, split=True, diet=True, lean=False)
    assert os.environ.get(header_diet.ENV) == "1" and os.environ.get(header_diet.LEAN_ENV) == "0"


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize(("extra", "level"), [
    ("", "lean"),
    # Tensor operators are ATen/TensorOperators.h's, which the lean copy leaves out: it fails
    # to compile, and the copy on torch/types.h builds.
    ("torch::Tensor add_them(torch::Tensor a, torch::Tensor b) { return a + b * 2; }\n", "diet"),
])
def test_a_published_style_source_on_torchs_own_headers_builds_from_the_copy(tmp_path, extra, level):
    """The real thing: torch's headers and flags (as its ninja file passes them), a source with
    AT_DISPATCH, the current stream, guards and std::vector results: the lean copy builds (one
    with a tensor operator, the copy on torch/types.h), and the object defines the function the
    binding calls."""
    import sysconfig

    from torch.utils import cpp_extension

    source = tmp_path / "cuda.cu"
    # The CPU machine's CUDA has no cuSPARSE headers, which ATen/cuda/CUDAContext.h includes.
    source.write_text(PUBLISHED_STYLES["dispatch, stream, checks"]
                      .replace("#include <ATen/cuda/CUDAContext.h>", "#include <c10/cuda/CUDAStream.h>")
                      .replace("at::cuda::getCurrentCUDAStream", "c10::cuda::getCurrentCUDAStream") + extra)
    includes = [flag for path in cpp_extension.include_paths() for flag in ("-I", path)]
    from experiments.build_speed import stub_headers

    includes += ["-I", sysconfig.get_paths()["include"], "-I", str(stub_headers(tmp_path))]
    log = tmp_path / "nvcc.jsonl"
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--generate-dependencies-with-compile", "--dependency-output", "cuda.o.d",
         *includes, "-D_GLIBCXX_USE_CXX11_ABI=1", "-std=c++17", "-O3", "-arch=sm_90", "-Xcompiler", "-fPIC",
         "-c", str(source), "-o", "cuda.o"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
        env={**os.environ, split_nvcc.LOG_ENV: str(log), header_diet.ENV: "1"})
    assert completed.returncode == 0, completed.stderr[-3000:]
    entry = json.loads(log.read_text())
    assert entry["diet"] == "used" and entry["diet_level"] == level, entry
    assert [attempt["level"] for attempt in entry.get("diet_failed", [])] == (["lean"] if level == "diet" else [])
    symbols = subprocess.run(["nm", "-C", str(tmp_path / "cuda.o")], capture_output=True, text=True).stdout
    assert re.search(r" T forward\(at::Tensor, double\)", symbols), symbols[:2000]
    if extra:
        assert re.search(r" T add_them\(at::Tensor, at::Tensor\)", symbols), symbols[:2000]


@needs_nvcc
def test_a_failure_of_the_diet_itself_leaves_the_build_to_the_source_as_written(tmp_path, monkeypatch):
    """Never worse than torch's build: an error of the diet's own (here: its copy cannot be
    planned) is logged and the source compiles as written."""
    (tmp_path / "kernel.cu").write_text(USES_TYPES_ONLY)
    stand_in_headers(tmp_path)
    log = tmp_path / "nvcc.jsonl"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(split_nvcc.LOG_ENV, str(log))
    monkeypatch.setenv(header_diet.ENV, "1")

    def broken(argv, lean=True):
        raise RuntimeError("the diet broke")

    monkeypatch.setattr(header_diet, "dieted_arguments", broken)
    assert split_nvcc.main(["-I", "include", "-c", "kernel.cu", "-o", "kernel.o"]) == 0
    entry = json.loads(log.read_text())
    assert entry["diet"] == "RuntimeError: the diet broke" and entry["returncode"] == 0
    assert (tmp_path / "kernel.o").exists()


@needs_nvcc
@pytest.mark.parametrize("split", ["1", "0"])
def test_the_depfile_names_the_source_as_written_and_the_unused_copy_is_removed(tmp_path, monkeypatch, split):
    """ninja's dependencies are the build's own files, not the copy compiled in their place."""
    monkeypatch.setenv(split_nvcc.SPLIT_ENV, split)
    run = wrapper(tmp_path, "#include <torch/extension.h>\nint use(Tensor t) { return twice(t); }\n", diet=True,
                  extra=("-MD", "-MF", str(tmp_path / "kernel.d")))
    assert run["returncode"] == 0 and run["log"]["diet_level"] == "lean"
    depfile = (tmp_path / "kernel.d").read_text()
    assert str(tmp_path / "kernel.cu") in depfile and ".lean.cu" not in depfile
    assert (tmp_path / "kernel-True.o.lean.cu").exists() and not list(tmp_path.glob("*.diet.cu"))
