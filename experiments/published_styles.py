"""CUDA candidates in the styles of published KernelBench solutions, for KernelBench's own problems
(#21's side by side: "72 CUDA candidates in the styles of published solutions, cold").

Each candidate keeps its problem's `Model` (the PyTorch glue most published solutions keep for
convolutions and GEMMs) and runs the output through a fused element-wise CUDA epilogue built with
`load_inline`, written the ways published solutions write them: `#include <torch/extension.h>`
with the binding written in the `.cu` (`PYBIND11_MODULE`, `functions=None`: half of them) or a
declaration in `cpp_sources` and `functions=[...]` (a quarter), or no torch include at all, the
source leaning on the `torch/types.h` that `load_inline` puts in front of it (a quarter); a
float4-vectorised kernel; two kernels on PyTorch's current stream; an `AT_DISPATCH_FLOATING_TYPES`
template; and across those, `extra_cuda_cflags=["-O3", "--use_fast_math"]`, a second
`load_inline` in the same file, `extra_include_paths` (see BUILD_STYLE_SHARES for how often
each). Every candidate has its own extension names and constants, so every build is cold. The epilogue computes x * 1 + 0 (exact), so
a candidate is correct unless made wrong on purpose (every twelfth: scaled by 1.5) or made not to
compile (two of them: an undeclared name).

    python -m experiments.published_styles --kernelbench .kernelbench --out DIR [--count 72]

writes DIR/problems/<level>_<name>.py (the problem, copied) and DIR/candidates/<level>_<name>.py;
pair them with `--pairs DIR/problems DIR/candidates`. Problems are spread over each level's
numbering (of 72: level 1 up to 26, level 3 16, level 2 the rest), skipping those whose inputs and
output together exceed --max-set-mib (sized on PyTorch's meta device, nothing allocated) or whose
output is not one float32 tensor (both harnesses keep five sets of each at once: ours in host
shared memory, fourteen evaluations at a time). In KernelBench's main problems only 12 of level
1's fit 256 MiB (most are 1-16 GiB a set, sizes made for timing, not for checking)."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

# Level 1 and level 3 candidates wanted of 72 (scaled to --count); level 2, whose problems fit
# best, takes the rest.
LEVEL_WANTS = {"level1": 26, "level3": 16}
LEVELS = ("level1", "level2", "level3")
STYLES = ("declared", "vectorized", "two_kernels", "dispatch")
WRONG_EVERY = 12  # the 12th, 24th, ... candidate scales its output by 1.5
BROKEN = (17, 53)  # these (1-based) do not compile
# How the build calls are written, by the candidate's (1-based) number. Of 72 published CUDA
# solutions (#41's count) 55 sources include torch/extension.h and 36 of those write the binding
# in the .cu: half the candidates here bind in the .cu, a quarter declare the binding in
# cpp_sources, and a quarter (the 17 without torch/extension.h) include no torch header and
# declare theirs. The other styles #41 names come without a count; their shares here are our
# estimate of how often generated solutions write them.
BUILD_STYLE_SHARES = {"binding in the .cu": "1/2", "declared in cpp_sources": "1/4", "no torch include": "1/4",
                      "--use_fast_math": "1/3", "a second load_inline": "1/6", "extra_include_paths": "1/12"}


def binding_in_cu(number: int) -> bool:
    return number % 4 in (1, 2)


def torch_include(number: int) -> bool:
    return number % 4 != 0


def fast_math(number: int) -> bool:
    return number % 3 == 0


def second_load(number: int) -> bool:
    return number % 6 == 5


def include_paths(number: int) -> bool:
    return number % 12 == 7


@dataclass(frozen=True)
class StyledPair:
    stem: str
    problem_source: Path
    style: str
    wrong: bool
    broken: bool
    binding: bool = False  # PYBIND11_MODULE written in the .cu, load_inline with functions=None
    torch_include: bool = True  # False: no torch header, load_inline's own torch/types.h in front
    fast_math: bool = False  # extra_cuda_cflags=["-O3", "--use_fast_math"]
    second_load: bool = False  # a second extension built in the same file, applied after the first
    include_paths: bool = False  # extra_include_paths=[CUDA's include folder]

    def build_styles(self) -> list[str]:
        """The build styles this candidate is written in, named as BUILD_STYLE_SHARES names them."""
        binding = ("binding in the .cu" if self.binding else "declared in cpp_sources" if self.torch_include
                   else "no torch include")
        extras = {"--use_fast_math": self.fast_math, "a second load_inline": self.second_load,
                  "extra_include_paths": self.include_paths}
        return [binding, *(name for name, written in extras.items() if written)]


_HEADER = '''"""Written for the side-by-side benchmark in the style "{style}": the problem's own model, its output
through a fused CUDA epilogue{what}."""
import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import CUDA_HOME, load_inline

'''

_DECLARED = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void epilogue_kernel_{tag}(const float* __restrict__ x, float* __restrict__ y, int64_t n, float scale) {{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{
        y[i] = x[i] * scale + 0.0f{broken};
    }}
}}

torch::Tensor epilogue_cuda(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    const int block_size = {block};
    const int64_t num_blocks = (n + block_size - 1) / block_size;
    epilogue_kernel_{tag}<<<num_blocks, block_size>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, {scale}f);
    return y;
}}
"""

_VECTORIZED = r"""
#include <torch/extension.h>

__global__ void epilogue_vec4_{tag}(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4, float scale) {{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {{
        float4 v = x[i];
        v.x = v.x * scale; v.y = v.y * scale; v.z = v.z * scale; v.w = v.w * scale;
        y[i] = v{broken};
    }}
}}

__global__ void epilogue_tail_{tag}(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n, float scale) {{
    int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * scale;
}}

torch::Tensor epilogue_cuda(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    const int64_t n4 = n / 4;
    const int threads = {block};
    if (n4 > 0) {{
        int64_t blocks = std::min<int64_t>((n4 + threads - 1) / threads, 65535);
        epilogue_vec4_{tag}<<<blocks, threads>>>(reinterpret_cast<const float4*>(xc.data_ptr<float>()),
                                                  reinterpret_cast<float4*>(y.data_ptr<float>()), n4, {scale}f);
    }}
    if (n - n4 * 4 > 0) {{
        epilogue_tail_{tag}<<<1, 4>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n4 * 4, n, {scale}f);
    }}
    return y;
}}
"""

_TWO_KERNELS = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void scale_kernel_{tag}(const float* in, float* out, int64_t n, float scale) {{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx < n) out[idx] = in[idx] * scale;
}}

__global__ void clamp_kernel_{tag}(float* data, int64_t n, float lo, float hi) {{
    int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx < n) data[idx] = fminf(fmaxf(data[idx], lo), hi){broken};
}}

torch::Tensor epilogue_cuda(torch::Tensor x) {{
    auto out = torch::empty_like(x);
    int64_t n = x.numel();
    int threads = {block};
    int64_t blocks = (n + threads - 1) / threads;
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    scale_kernel_{tag}<<<blocks, threads, 0, stream>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, {scale}f);
    clamp_kernel_{tag}<<<blocks, threads, 0, stream>>>(out.data_ptr<float>(), n, -INFINITY, INFINITY);
    return out;
}}
"""

_DISPATCH = r"""
#include <torch/extension.h>

template <typename scalar_t>
__global__ void epilogue_kernel_{tag}(const scalar_t* __restrict__ input, scalar_t* __restrict__ output, size_t size) {{
    const size_t index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index < size) {{
        output[index] = input[index] * static_cast<scalar_t>({scale}){broken};
    }}
}}

torch::Tensor epilogue_cuda(torch::Tensor input) {{
    auto output = torch::empty_like(input);
    const int threads = {block};
    const int blocks = (input.numel() + threads - 1) / threads;
    AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "epilogue_cuda", ([&] {{
        epilogue_kernel_{tag}<scalar_t><<<blocks, threads>>>(input.data_ptr<scalar_t>(), output.data_ptr<scalar_t>(),
                                                             input.numel());
    }}));
    return output;
}}
"""

_KERNELS = {"declared": _DECLARED, "vectorized": _VECTORIZED, "two_kernels": _TWO_KERNELS, "dispatch": _DISPATCH}

# The binding written in the .cu, as most published solutions write it.
_BINDING = r"""
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
    m.def("epilogue_cuda", &epilogue_cuda, "fused epilogue (CUDA)");
}}
"""
_DECLARED_BINDING = '''epilogue_cpp_source = "torch::Tensor epilogue_cuda(torch::Tensor x);"'''
_BINDING_IN_CU = '''epilogue_cpp_source = ""'''

_LOAD = '''
epilogue_source = r"""{cuda}"""

{cpp_source}

epilogue = load_inline(
    name="{name}",
    cpp_sources=epilogue_cpp_source,
    cuda_sources=epilogue_source,
    functions={functions},
    verbose=False,
    extra_cflags=["-O3"],{build_extras}
    extra_ldflags=[""],
)
{second}

class ModelNew(Model):
    """The problem's model, its output through the custom epilogue."""

    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, torch.Tensor) and out.is_cuda and out.dtype == torch.float32:
            return {finish}epilogue.epilogue_cuda(out.contiguous()){finish_close}
        return out
'''

# A second extension of the same file, as solutions that build one per fused step write it.
_SECOND_LOAD = '''
finish_source = r"""
#include <torch/extension.h>

__global__ void finish_kernel_{tag}(float* data, int64_t n) {{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] = data[i] * 1.0f;
}}

torch::Tensor finish_cuda(torch::Tensor x) {{
    const int64_t n = x.numel();
    finish_kernel_{tag}<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
    return x;
}}
"""

finish = load_inline(
    name="{name}_finish",
    cpp_sources="torch::Tensor finish_cuda(torch::Tensor x);",
    cuda_sources=finish_source,
    functions=["finish_cuda"],
    verbose=False,{build_extras}
)
'''


def model_source(problem_text: str) -> str:
    """The problem's imports, constants and `Model` class, without get_inputs/get_init_inputs."""
    tree = ast.parse(problem_text)
    kept = [node for node in tree.body
            if not (isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"))]
    return "\n\n".join(ast.get_source_segment(problem_text, node) for node in kept) + "\n"


def candidate_source(pair: StyledPair, index: int) -> str:
    tag = f"{pair.stem}_{index}".replace("-", "_")
    block = (128, 256, 512, 1024)[index % 4]
    cuda = _KERNELS[pair.style].format(tag=tag, block=block, scale="1.5" if pair.wrong else "1.0",
                                       broken=" + undeclared_offset" if pair.broken else "")
    what = " (wrong on purpose: scaled by 1.5)" if pair.wrong else " (does not compile, on purpose)" if pair.broken else ""
    style = ", ".join([pair.style, *pair.build_styles()])
    if pair.binding:
        cuda, cpp_source, functions = cuda + _BINDING.format(), _BINDING_IN_CU, "None"
    else:
        cpp_source, functions = _DECLARED_BINDING, '["epilogue_cuda"]'
    if not pair.torch_include:  # load_inline puts torch/types.h, cuda.h and cuda_runtime.h in front
        cuda = cuda.replace("#include <torch/extension.h>\n", "#include <cuda_runtime.h>\n", 1)
    build_extras = ""
    if pair.fast_math:
        build_extras += '\n    extra_cuda_cflags=["-O3", "--use_fast_math"],'
    if pair.include_paths:
        build_extras += '\n    extra_include_paths=[os.path.join(CUDA_HOME or "/usr/local/cuda", "include")],'
    name = f"styled_{tag}"
    second = _SECOND_LOAD.format(tag=tag, name=name, build_extras=build_extras) if pair.second_load else ""
    finish, finish_close = ("finish.finish_cuda(", ")") if pair.second_load else ("", "")
    return (_HEADER.format(style=style, what=what) + model_source(pair.problem_source.read_text())
            + _LOAD.format(cuda=cuda, name=name, cpp_source=cpp_source, functions=functions,
                           build_extras=build_extras, second=second, finish=finish, finish_close=finish_close))


def set_mib(problem: Path) -> float | None:
    """MiB of one set's inputs and output, sized on the meta device; None if the output is not
    one float32 tensor or the sizing fails."""
    spec = importlib.util.spec_from_file_location(f"sized_{abs(hash(str(problem)))}", problem)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        with torch.device("meta"):
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
            output = model(*inputs)
    except Exception:  # noqa: BLE001 - an op without a meta kernel: the problem is not taken
        return None
    if type(output) is not torch.Tensor or output.dtype != torch.float32:
        return None
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)] + [output]
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def fitting_problems(kernelbench: Path, level: str, max_set_mib: float) -> list[Path]:
    problems = sorted((kernelbench / "KernelBench" / level).glob("*.py"), key=lambda p: int(p.stem.split("_")[0]))
    return [p for p in problems if (mib := set_mib(p)) is not None and mib <= max_set_mib]


def spread(items: list, wanted: int) -> list:
    """`wanted` of `items`, evenly spaced (all of them if there are not more)."""
    if wanted >= len(items):
        return list(items)
    return [items[int(index * len(items) / wanted)] for index in range(wanted)]


def choose(kernelbench: Path, count: int, max_set_mib: float) -> list[StyledPair]:
    """`count` problems spread over each level's numbering: level 1 and 3 up to their wants
    (as many as fit), level 2 the rest."""
    fitting = {level: fitting_problems(kernelbench, level, max_set_mib) for level in LEVELS}
    taken = {level: spread(fitting[level], round(want * count / 72)) for level, want in LEVEL_WANTS.items()}
    taken["level2"] = spread(fitting["level2"], count - sum(map(len, taken.values())))
    chosen = []
    for level in LEVELS:
        for problem in taken[level]:
            number = len(chosen) + 1
            chosen.append(StyledPair(f"{level}_{problem.stem}", problem, STYLES[number % len(STYLES)],
                                     wrong=number % WRONG_EVERY == 0, broken=number in BROKEN,
                                     binding=binding_in_cu(number), torch_include=torch_include(number),
                                     fast_math=fast_math(number), second_load=second_load(number),
                                     include_paths=include_paths(number)))
    return chosen


def write_pairs(kernelbench: Path, out: Path, count: int = 72, max_set_mib: float = 256.0,
                only: str | None = None) -> list[StyledPair]:
    """Writes the pairs (only those written in build style `only`, if given) and styles.json, each
    candidate's build styles by its stem (what a report groups by)."""
    pairs = [(index, pair) for index, pair in enumerate(choose(kernelbench, count, max_set_mib), start=1)
             if only is None or only in pair.build_styles()]
    (out / "problems").mkdir(parents=True, exist_ok=True)
    (out / "candidates").mkdir(parents=True, exist_ok=True)
    for index, pair in pairs:
        (out / "problems" / f"{pair.stem}.py").write_text(pair.problem_source.read_text())
        (out / "candidates" / f"{pair.stem}.py").write_text(candidate_source(pair, index))
    (out / "styles.json").write_text(json.dumps({pair.stem: pair.build_styles() for _, pair in pairs}, indent=1))
    return [pair for _, pair in pairs]


def style_counts(pairs: list[StyledPair]) -> dict[str, int]:
    """How many of `pairs` are written in each build style of BUILD_STYLE_SHARES."""
    return {style: sum(style in pair.build_styles() for pair in pairs) for style in BUILD_STYLE_SHARES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.published_styles",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench", type=Path, default=Path(".kernelbench"), help="a KernelBench checkout")
    parser.add_argument("--out", type=Path, required=True, help="problems/ and candidates/ are written here")
    parser.add_argument("--count", type=int, default=72)
    parser.add_argument("--max-set-mib", type=float, default=256.0,
                        help="largest inputs and output of one set taken (default 256 MiB)")
    parser.add_argument("--only", choices=sorted(BUILD_STYLE_SHARES), metavar="STYLE",
                        help="write only the candidates of this build style (e.g. 'binding in the .cu')")
    args = parser.parse_args(argv)
    if not (args.kernelbench / "KernelBench" / "level1").is_dir():
        print(f"{args.kernelbench}: no KernelBench/level1 in it; pass a KernelBench checkout with --kernelbench",
              file=sys.stderr)
        return 2
    pairs = write_pairs(args.kernelbench, args.out, args.count, args.max_set_mib, args.only)
    by_level = {level: sum(p.stem.startswith(level) for p in pairs) for level in LEVELS}
    print(f"{len(pairs)} pairs in {args.out} ({', '.join(f'{k} {v}' for k, v in by_level.items())}; "
          f"{sum(p.wrong for p in pairs)} wrong and {sum(p.broken for p in pairs)} not compiling on purpose)")
    table = Table("build style", "candidates", "share", "wanted")
    for style, count in style_counts(pairs).items():
        table.add_row(style, str(count), f"{count / max(len(pairs), 1):.2f}", BUILD_STYLE_SHARES[style])
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
