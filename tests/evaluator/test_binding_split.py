"""binding_split.py: a CUDA source with its own PYBIND11_MODULE compiled as its kernels on the
header diet and its binding as C++ with torch's C++ flags, linked into the one object asked for;
every source it could change is compiled as written. The text split on published styles and
refusals (fast), then real builds on torch's own headers through torch's own ninja file (slow)."""

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cudaagent.builds import binding_split, header_diet, split_nvcc

from .test_header_diet import PUBLISHED_STYLES

NVCC = shutil.which("nvcc")

# The binding in the .cu, the way published KernelBench solutions write it (the header diet's
# elementwise style with its binding).
ADDRESS_AND_DOCSTRING = PUBLISHED_STYLES["elementwise"].lstrip("\n") + r"""
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("relu_cuda", &relu_cuda, "ReLU (CUDA) {not a brace}");
}
"""
ALIAS_ARGS_AND_OVERLOADS = r"""// Fused GEMM epilogue: bias + GELU
#include <torch/extension.h>
#include <vector>
namespace py = pybind11;

__global__ void epilogue(float* y, const float* b, int n, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += b[i % cols];
}

std::vector<torch::Tensor> forward(torch::Tensor x,
                                   torch::Tensor w,
                                   torch::Tensor b, double scale = 1.0)  // the model's forward
{
    auto y = torch::matmul(x, w.t()).contiguous();
    epilogue<<<(y.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), b.data_ptr<float>(), y.numel(), y.size(1));
    return {y * scale};
}

torch::Tensor forward(torch::Tensor x) { return x; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", py::overload_cast<torch::Tensor, torch::Tensor, torch::Tensor, double>(&forward),
          py::arg("x"), py::arg("w"), py::arg("b"), py::arg("scale") = 1.0);
    m.def("identity", [](torch::Tensor x) { return forward(x); });
}
"""
STYLES = {"address and docstring": (ADDRESS_AND_DOCSTRING, ["relu_cuda"]),
          "alias, py::arg, overloads, a lambda": (ALIAS_ARGS_AND_OVERLOADS, ["forward"])}


@pytest.mark.parametrize("style", sorted(STYLES))
def test_published_styles_split_into_kernels_line_for_line_and_a_binding_that_declares_what_it_calls(style):
    source, declared = STYLES[style]
    parts = binding_split.split(source, "/src/cuda.cu")
    assert isinstance(parts, binding_split.Split), parts
    assert parts.declared == declared
    # The kernels keep every line at its number: only the block (and a pybind11 alias) is blank.
    kernels, original = parts.kernels.splitlines(), source.splitlines()
    assert len(kernels) == len(original)
    for kept, line in zip(kernels, original, strict=True):
        assert kept == line or (kept.strip() == "" and ("PYBIND11" in source and line.strip() != ""))
    assert "PYBIND11_MODULE" not in parts.kernels and "pybind11" not in parts.kernels
    assert header_diet.why_not(parts.kernels) is None  # the kernels now take the diet
    assert header_diet.why_not(source) is not None  # the source as written does not
    # The binding: the full header, the alias, a declaration per definition #line'd to it, the block.
    assert parts.binding.startswith(binding_split.BINDING_INCLUDE)
    block_line = next(number for number, line in enumerate(original, 1) if "PYBIND11_MODULE" in line)
    assert f'#line {block_line} "/src/cuda.cu"\nPYBIND11_MODULE' in parts.binding
    heads = re.findall(r'#line (\d+) "/src/cuda.cu"\n([^#]*?)\n;', parts.binding)
    for line, head in heads:
        assert original[int(line) - 1].strip().startswith(head.splitlines()[0].strip())
    assert len(heads) == (2 if declared == ["forward"] else 1)
    if "namespace py" in source:
        assert "namespace py = pybind11;" in parts.binding


# (a source, what the refusal says): each compiled as written.
REFUSED = [
    (ADDRESS_AND_DOCSTRING.replace("torch::Tensor relu_cuda", "static torch::Tensor relu_cuda"), "static"),
    (ADDRESS_AND_DOCSTRING.replace("torch::Tensor relu_cuda", "inline torch::Tensor relu_cuda"), "inline"),
    (ADDRESS_AND_DOCSTRING.replace("torch::Tensor relu_cuda(torch::Tensor x)",
                                   "template <int N> torch::Tensor relu_cuda(torch::Tensor x)"), "template"),
    (ADDRESS_AND_DOCSTRING + "PYBIND11_MODULE(other, m) {}\n", "2 PYBIND11_MODULE blocks"),
    (ADDRESS_AND_DOCSTRING.replace("PYBIND11_MODULE", "#ifdef WITH_BINDING\nPYBIND11_MODULE") + "#endif\n",
     "inside an #if"),
    ("#define NAME \"relu\"\n" + ADDRESS_AND_DOCSTRING.replace('m.def("relu_cuda"', "m.def(NAME"), "macro NAME"),
    (ADDRESS_AND_DOCSTRING.replace("torch::Tensor relu_cuda(torch::Tensor x)", "torch::Tensor relu_cuda(TENSOR x)")
     .replace("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#define TENSOR torch::Tensor"), "macro TENSOR"),
    (ADDRESS_AND_DOCSTRING + "#undef X\n", "#undef"),
    (ADDRESS_AND_DOCSTRING + 'const char* s = R"(x)";\n', "raw string"),
    (ADDRESS_AND_DOCSTRING.replace('&relu_cuda', '&torch::relu'), "names none of the source's functions"),
    ("#include <torch/extension.h>\nnamespace ns {\ntorch::Tensor f(torch::Tensor x) { return x; }\n"
     "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"f\", &f); }\n}\n", "not at file scope"),
]


@pytest.mark.parametrize(("source", "named"), REFUSED)
def test_a_source_the_split_could_change_is_compiled_as_written(source, named):
    reason = binding_split.split(source, "/src/cuda.cu")
    assert isinstance(reason, str) and named in reason, reason


def test_the_binding_may_only_call_what_the_kernels_object_defines():
    """nm -P's (name, type): a declared function the kernels' object lacks (a declaration that
    named another type, say) is found; torch's and Python's symbols are not the source's."""
    binding = [("_Z7forwardN2at6TensorE", "U"), ("_ZN2at6Tensor5emptyEv", "U"), ("PyInit_ext", "T"),
               ("launch", "U"), ("_Z9forward_xN2at6TensorE", "U")]
    kernels = [("_Z7forwardN2at6TensorE", "T"), ("_Z8epiloguePfPKfii", "T")]
    assert binding_split.unresolved(binding, kernels, ["forward", "launch"]) == ["launch"]
    assert binding_split.unresolved(binding, [("launch", "T"), *kernels], ["forward", "launch"]) == []
    assert binding_split.unresolved(binding, [("launch", "T")], ["forward", "launch"]) == ["_Z7forwardN2at6TensorE"]


def test_the_binding_is_compiled_with_the_cxx_and_flags_of_torchs_ninja_file(tmp_path):
    (tmp_path / "build.ninja").write_text(
        "ninja_required_version = 1.3\ncxx = c++\nnvcc = /usr/bin/nvcc\n\n"
        "cflags = -DTORCH_EXTENSION_NAME=ext -DPYBIND11_COMPILER_TYPE=\\\"_gcc\\\" -isystem /a$ b -fPIC -std=c++17\n"
        "post_cflags =\ncuda_cflags = -O3\n")
    assert binding_split.cxx_command(str(tmp_path)) == [
        "c++", "-DTORCH_EXTENSION_NAME=ext", '-DPYBIND11_COMPILER_TYPE="_gcc"', "-isystem", "/a", "b", "-fPIC",
        "-std=c++17"]
    assert "no ninja file" in binding_split.cxx_command(str(tmp_path / "elsewhere"))


@pytest.mark.parametrize("argv", [["-c", "a.cu"], ["-o", "x.o", "a.cu"], ["-c", "a.cu", "-c", "b.cu", "-o", "x.o"],
                                  ["-o", "x.o", "-c"]])
def test_a_compile_that_is_not_one_cu_to_one_object_is_left_to_nvcc(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.cu").write_text(ADDRESS_AND_DOCSTRING)
    log = {}
    assert split_nvcc.split_binding_compile(argv, log) is None and "binding" not in log


# -- real builds: torch's headers, torch's own ninja file, nvcc through the wrapper --------------

needs_nvcc = pytest.mark.skipif(NVCC is None or shutil.which("ninja") is None, reason="nvcc or ninja is not on PATH")


def ninja_build(directory: Path, source: str, diet: bool, extra_cflags: tuple = (), main: str = "",
                environment: dict | None = None, main_text: str | None = None) -> dict:
    """The objects of a CUDA extension as load_inline lays it out (main.cpp, cuda.cu), from the
    ninja file torch writes, nvcc being the wrapper: ninja's status, the wrapper's log line, the
    CUDA object's symbols. main.cpp is load_inline's include and `main`, or `main_text` alone."""
    from torch.utils import cpp_extension

    from experiments.build_speed import stub_headers

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cuda.cu").write_text(source)
    (directory / "main.cpp").write_text(main_text if main_text is not None else "#include <torch/extension.h>\n" + main)
    writer = cpp_extension._write_ninja_file_to_build_library
    arguments = {"name": "split_ext", "sources": [str(directory / "main.cpp"), str(directory / "cuda.cu")],
                 "extra_cflags": list(extra_cflags), "extra_cuda_cflags": ["-O3"], "extra_sycl_cflags": [],
                 "extra_ldflags": [], "extra_include_paths": [str(stub_headers(directory))], "with_cuda": True,
                 "with_sycl": False, "is_standalone": False}
    old_home, old_arch = cpp_extension.CUDA_HOME, os.environ.get("TORCH_CUDA_ARCH_LIST")
    cpp_extension.CUDA_HOME = str(Path(NVCC).resolve().parents[1])
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    try:
        writer(path=str(directory / "build.ninja"),
               **{name: value for name, value in arguments.items() if name in inspect.signature(writer).parameters})
    finally:
        cpp_extension.CUDA_HOME = old_home
        os.environ.pop("TORCH_CUDA_ARCH_LIST", None) if old_arch is None else os.environ.update(TORCH_CUDA_ARCH_LIST=old_arch)
    ninja_file = directory / "build.ninja"
    ninja_file.write_text(re.sub(r"^nvcc = .*$", f"nvcc = {sys.executable} {Path(split_nvcc.__file__).resolve()}",
                                 ninja_file.read_text(), flags=re.M))
    log = directory / "nvcc.jsonl"
    completed = subprocess.run(["ninja", "cuda.cuda.o", "main.o"], cwd=directory, capture_output=True, text=True,
                               timeout=900, env={**os.environ, split_nvcc.LOG_ENV: str(log),
                                                 header_diet.ENV: "1" if diet else "0",
                                                 split_nvcc.SPLIT_WHEN_BUSY_ENV: "1", **(environment or {})})
    symbols = binding_split.nm_symbols(str(directory / "cuda.cuda.o")) if completed.returncode == 0 else []
    main_symbols = binding_split.nm_symbols(str(directory / "main.o")) if completed.returncode == 0 else []
    return {"returncode": completed.returncode, "output": completed.stdout + completed.stderr,
            "log": json.loads(log.read_text().splitlines()[-1]) if log.exists() else {}, "symbols": symbols,
            "main_symbols": main_symbols}


def global_symbols(symbols: list[tuple[str, str]]) -> set[str]:
    """What the object exports (functions and the module's init), less nvcc's per-file names."""
    return {name for name, kind in symbols if kind == "T" and "tmpxft" not in name and "__sti__" not in name}


@needs_nvcc
@pytest.mark.slow
def test_a_published_style_source_with_its_binding_builds_split_and_exports_what_it_does_as_written(tmp_path):
    source = ALIAS_ARGS_AND_OVERLOADS.replace("std::vector<torch::Tensor> forward", "std::vector<torch::Tensor> forward")
    split = ninja_build(tmp_path / "split", source, diet=True)
    assert split["returncode"] == 0, split["output"][-3000:]
    assert split["log"]["binding"] == "split" and split["log"]["diet"] == "used", split["log"]
    assert split["log"]["declared"] == ["forward"] and split["log"]["output"] == "cuda.cuda.o"
    as_written = ninja_build(tmp_path / "as-written", source, diet=False)
    assert as_written["returncode"] == 0 and "binding" not in as_written["log"]
    exported = global_symbols(split["symbols"])
    assert "PyInit_split_ext" in exported
    assert exported == global_symbols(as_written["symbols"])
    # Nothing the binding calls is left for the loader to find.
    undefined = {name for name, kind in split["symbols"] if kind == "U"}
    assert not {name for name in undefined if name.startswith("_Z7forward")}
    # With a depfile asked for (torch's CUDA wheels ask, `--dependency-output`), it names the
    # object ninja asked for and the source as written, never the parts.
    command = subprocess.run(["ninja", "-t", "commands", "cuda.cuda.o"], cwd=tmp_path / "split", capture_output=True,
                             text=True, check=True).stdout.splitlines()[-1]
    again = subprocess.run(f"{command} --generate-dependencies-with-compile --dependency-output cuda.cuda.o.d",
                           shell=True, cwd=tmp_path / "split", capture_output=True, text=True, timeout=900,
                           env={**os.environ, header_diet.ENV: "1", split_nvcc.SPLIT_WHEN_BUSY_ENV: "1"})
    assert again.returncode == 0, again.stderr[-2000:]
    depfile = (tmp_path / "split" / "cuda.cuda.o.d").read_text()
    assert re.match(r"cuda\.cuda\.o\s*:", depfile) and "kernels.o" not in depfile, depfile[:300]
    assert str(tmp_path / "split" / "cuda.cu") in depfile and ".lean.cu" not in depfile
    assert not list((tmp_path / "split").glob("*.binding.*")) and not list((tmp_path / "split").glob("*.kernels.o"))


@needs_nvcc
@pytest.mark.slow
def test_a_binding_that_needs_more_of_the_source_than_its_functions_builds_as_written(tmp_path):
    """The block reads a constant of the source's: the binding alone does not compile, so the
    source is compiled as written (and builds, as it does without the split)."""
    source = ADDRESS_AND_DOCSTRING.replace("__global__", "const int kThreads = 256;\n__global__", 1).replace(
        'm.def("relu_cuda", &relu_cuda, "ReLU (CUDA) {not a brace}");',
        'm.def("relu_cuda", &relu_cuda); m.attr("threads") = kThreads;')
    run = ninja_build(tmp_path, source, diet=True)
    assert run["returncode"] == 0, run["output"][-3000:]
    assert run["log"]["binding"] == "its binding did not compile (exit 1)"
    assert "PyInit_split_ext" in global_symbols(run["symbols"])
    assert "kThreads" not in run["output"]  # the failed part's errors are not the build's
    assert not list(tmp_path.glob("*.binding.*")) and not list(tmp_path.glob("*.kernels.*"))


@pytest.mark.parametrize("style", ["declared", "vectorized", "two_kernels", "dispatch"])
def test_every_published_style_of_the_benchmark_set_with_its_binding_in_the_cu_splits(tmp_path, style):
    """experiments/published_styles.py writes two in three candidates with the binding in the .cu:
    each of its kernel styles splits, and its kernels take the diet."""
    import ast

    from experiments.published_styles import StyledPair, candidate_source

    problem = tmp_path / "problem.py"
    problem.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n"
                       "    def forward(self, x):\n        return x\n")
    text = candidate_source(StyledPair("level1_1_x", problem, style, wrong=False, broken=False, binding=True), 1)
    tree = ast.parse(text)
    strings = {node.targets[0].id: node.value.value for node in tree.body
               if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)}
    assert strings["epilogue_cpp_source"] == "" and "functions=None" in text
    parts = binding_split.split(strings["epilogue_source"], "/src/cuda.cu")
    assert isinstance(parts, binding_split.Split), parts
    assert parts.declared == ["epilogue_cuda"] and header_diet.why_not(parts.kernels) is None


@pytest.mark.parametrize("style", ["declared", "vectorized", "two_kernels", "dispatch"])
def test_every_published_style_without_a_torch_include_takes_the_lean_copy_as_load_inline_lays_it_out(tmp_path, style):
    """A quarter of the benchmark set includes no torch header: the CUDA source leans on the
    torch/types.h load_inline writes in front of it. That file takes the lean copy too (no
    diet: the diet only replaces torch/extension.h)."""
    import ast

    from torch.utils import cpp_extension

    from experiments.published_styles import StyledPair, candidate_source

    problem = tmp_path / "problem.py"
    problem.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n"
                       "    def forward(self, x):\n        return x\n")
    text = candidate_source(StyledPair("level1_1_x", problem, style, wrong=False, broken=False,
                                       torch_include=False), 4)
    tree = ast.parse(text)
    source = {node.targets[0].id: node.value.value for node in tree.body
              if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)}["epilogue_source"]
    assert "torch/" not in source.replace("c10/cuda", "")
    as_built = "\n".join(["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>", source])
    torch_ops = header_diet.ops_names(cpp_extension.include_paths())
    assert header_diet.lean_why_not(as_built, torch_ops) is None
    leaned = header_diet.leaned(as_built, "/b/cuda.cu", torch_ops)
    assert "torch/types.h" not in leaned and "#include <ATen/core/Tensor.h>" in leaned


@needs_nvcc
@pytest.mark.slow
def test_with_the_binding_moved_into_main_cpp_the_cu_compiles_its_kernels_only(tmp_path):
    """fast_build.binding_to_main puts the binding in load_inline's bare main.cpp and names the .cu
    to the wrapper: the .cu's object holds the kernels and the functions (no module), main.o the
    module, which calls what the .cu's object defines."""
    source = ALIAS_ARGS_AND_OVERLOADS
    directory = tmp_path / "moved"
    parts = binding_split.split(source, str(directory / "cuda.cu"))
    run = ninja_build(directory, source, diet=True, main=parts.binding,
                      environment={split_nvcc.BINDING_IN_MAIN_ENV: str(directory / "cuda.cu")})
    assert run["returncode"] == 0, run["output"][-3000:]
    assert run["log"]["binding"] == "in main.cpp" and run["log"]["diet"] == "used", run["log"]
    assert run["log"]["output"] == "cuda.cuda.o"
    cuda_exports, main_exports = global_symbols(run["symbols"]), global_symbols(run["main_symbols"])
    assert "PyInit_split_ext" in main_exports and "PyInit_split_ext" not in cuda_exports
    called = {name for name, kind in run["main_symbols"] if kind == "U" and name.startswith("_Z7forward")}
    assert called and called <= cuda_exports


@needs_nvcc
@pytest.mark.slow
def test_the_moved_bindings_lean_copy_builds_and_binds_what_the_one_on_torch_extension_h_binds(tmp_path):
    """fast_build.binding_to_main first compiles the binding's lean copy (header_diet.lean_binding:
    ATen's Tensor and torch's pybind, no torch/extension.h): with an alias, py::arg defaults, an
    overload_cast and a lambda, it builds, holds the module, and calls the kernels' object for
    exactly the functions the binding on torch/extension.h calls (the same mangled signatures)."""
    from torch.utils import cpp_extension

    builds = {}
    for level in ("lean", "extension"):
        directory = tmp_path / level
        parts = binding_split.split(ALIAS_ARGS_AND_OVERLOADS, str(directory / "cuda.cu"))
        lean, why = header_diet.lean_binding(parts.binding, str(directory / "main.cpp"), cpp_extension.include_paths())
        assert why is None and "torch/extension.h" not in lean, why
        main_text = lean if level == "lean" else "#include <torch/extension.h>\n" + parts.binding
        builds[level] = run = ninja_build(directory, ALIAS_ARGS_AND_OVERLOADS, diet=True, main_text=main_text,
                                          environment={split_nvcc.BINDING_IN_MAIN_ENV: str(directory / "cuda.cu")})
        assert run["returncode"] == 0, run["output"][-3000:]
        assert "PyInit_split_ext" in global_symbols(run["main_symbols"])
    called = {level: {name for name, kind in run["main_symbols"] if kind == "U" and name.startswith("_Z7forward")}
              for level, run in builds.items()}
    assert called["lean"] and called["lean"] == called["extension"]
    assert called["lean"] <= global_symbols(builds["lean"]["symbols"])


@needs_nvcc
@pytest.mark.slow
def test_the_lean_binding_builds_on_its_shared_pch_and_binds_the_same(tmp_path, monkeypatch):
    """The lean copy compiled with the shared PCH of its opening headers -included first
    (fast_build.with_ready_pch), as a cold `bench` builds it once that PCH is made: gcc
    takes the PCH (`-H` marks a precompiled header it used with "!"; -Winvalid-pch would say why
    not), and main.o holds the module and calls the kernels' object for the same functions as the
    lean copy built without it."""
    from torch.utils import cpp_extension

    from pytest_cudaagent.builds import fast_build

    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(Path(NVCC).resolve().parents[1]))
    variant = fast_build.pch_variant(["-O3"], True, header_diet.LEAN_BINDING_HEADERS)
    header = fast_build.ensure_pch(fast_build.pch_dir(tmp_path / "cache"), variant)
    assert header is not None and fast_build.ready_pch(fast_build.pch_dir(tmp_path / "cache"), variant) == header
    builds = {}
    for level, flags in (("lean", ("-O3",)),
                         ("lean with its pch", ("-O3", "-H", "-Winvalid-pch", "-include", str(header)))):
        directory = tmp_path / level.replace(" ", "_")
        parts = binding_split.split(ALIAS_ARGS_AND_OVERLOADS, str(directory / "cuda.cu"))
        lean, why = header_diet.lean_binding(parts.binding, str(directory / "main.cpp"), cpp_extension.include_paths())
        assert why is None, why
        builds[level] = run = ninja_build(directory, ALIAS_ARGS_AND_OVERLOADS, diet=True, main_text=lean,
                                          extra_cflags=flags,
                                          environment={split_nvcc.BINDING_IN_MAIN_ENV: str(directory / "cuda.cu")})
        assert run["returncode"] == 0, run["output"][-3000:]
        assert "PyInit_split_ext" in global_symbols(run["main_symbols"])
    output = builds["lean with its pch"]["output"]
    assert f"! {header}.gch" in output.splitlines(), output[-2000:]
    assert "not used because" not in output, output[-2000:]
    called = {level: {name for name, kind in run["main_symbols"] if kind == "U" and name.startswith("_Z7forward")}
              for level, run in builds.items()}
    assert called["lean"] and called["lean"] == called["lean with its pch"]


@needs_nvcc
@pytest.mark.slow
def test_load_inlines_own_main_cpp_on_its_lean_copy_builds_and_binds_what_it_binds_as_written(tmp_path):
    """functions=[...]: load_inline's main.cpp (torch/extension.h, the declaration, its module
    wrapping the function in torch::wrap_pybind_function) compiled on its lean copy
    (fast_build.lean_declared_main) and as written: both objects hold the module and call the
    same function of the kernels' object."""
    from torch.utils import cpp_extension

    from pytest_cudaagent.builds import fast_build

    source = PUBLISHED_STYLES["elementwise"].lstrip("\n")
    as_written = (fast_build.BARE_MAIN + "\ntorch::Tensor relu_cuda(torch::Tensor x);\n"
                  "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                  'm.def("relu_cuda", torch::wrap_pybind_function(relu_cuda), "relu_cuda");\n}')
    builds = {}
    for level in ("lean", "as written"):
        directory = tmp_path / level.replace(" ", "_")
        lean, why = header_diet.lean_binding(as_written, str(directory / "main.cpp"), cpp_extension.include_paths())
        assert why is None and "torch/extension.h" not in lean and "torch/csrc/Exceptions.h" in lean, why
        builds[level] = run = ninja_build(directory, source, diet=True, main_text=lean if level == "lean" else as_written)
        assert run["returncode"] == 0, run["output"][-3000:]
        assert "PyInit_split_ext" in global_symbols(run["main_symbols"])
    called = {level: {name for name, kind in run["main_symbols"] if kind == "U" and "relu_cuda" in name}
              for level, run in builds.items()}
    assert called["lean"] and called["lean"] == called["as written"]
    assert called["lean"] <= global_symbols(builds["lean"]["symbols"])
