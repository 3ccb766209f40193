"""The candidates' build path (fast_build.py): shared precompiled header, flags read without
running the candidate, and build locks that a killed build does not leave behind."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from pytest_cudaagent import evaluate
from pytest_cudaagent.builds import fast_build, header_diet
from pytest_cudaagent.builds.fast_build import (
    BUILD_LOG,
    PCH_HEADER,
    TORCH_LOCK,
    build_lock,
    ensure_pch,
    pch_dir,
    pch_variant,
    ready_pch,
    requested_variants,
)
from pytest_cudaagent.core.config import PCH_BUILD_TIMEOUT_S, default_cache_dir
from pytest_cudaagent.core.files import check_candidate

from ..helpers import CPU_CANDIDATES, PROBLEMS, TEST_CANDIDATES, cpu_config


def write_candidate(path: Path, extension: str, cpp: str, extra_cflags: str = '["-O3"]') -> Path:
    """A row_sum candidate whose C++ is `cpp`, built by load_inline with `extra_cflags`."""
    path.write_text(textwrap.dedent(f'''
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        extension = load_inline({extension!r}, cpp_sources=[{cpp!r}], functions=["row_sum"],
                                extra_cflags={extra_cflags})


        class ModelNew(nn.Module):
            def forward(self, x):
                return extension.row_sum(x.contiguous())
    '''))
    return path


ROW_SUM_CPP = """
torch::Tensor row_sum(torch::Tensor x) {
  auto out = torch::empty({x.size(0)}, x.options());
  auto in = x.accessor<float, 2>();
  auto result = out.accessor<float, 1>();
  for (int64_t r = 0; r < x.size(0); ++r) {
    double total = 0.0;
    for (int64_t c = 0; c < x.size(1); ++c) total += in[r][c];
    result[r] = static_cast<float>(total * ROW_SCALE);
  }
  return out;
}
"""


def build_log_lines(cache_dir: Path, key: str) -> int:
    log = pch_dir(cache_dir) / BUILD_LOG
    return sum(line.startswith(key) for line in log.read_text().splitlines()) if log.exists() else 0


def test_flags_are_read_from_the_source_and_unsafe_ones_get_no_shared_header(tmp_path):
    implicit = write_candidate(tmp_path / "implicit.py", "implicit_headers", ROW_SUM_CPP)
    plain = requested_variants(check_candidate(implicit), "cpu")
    assert [variant.cflags[-1] for variant in plain] == ["-O3"]
    # The candidate's own macros share the header: gcc checks the macros the header reads.
    assert pch_variant(["-O3", "-DROW_SCALE=2"], False) == plain[0]
    for unsafe in (["-fplugin=/tmp/x.so"], ["-B/tmp"], ["-include", "/tmp/x.h"], ["-Wl,-rpath,/x"]):
        assert pch_variant(unsafe, False) is None
    computed = write_candidate(tmp_path / "computed.py", "computed_flags", ROW_SUM_CPP, extra_cflags="FLAGS")
    assert requested_variants(check_candidate(computed), "cpu") == []


def test_a_lock_file_left_by_a_killed_build_is_cleared_while_a_live_build_lock_is_respected(tmp_path):
    (tmp_path / TORCH_LOCK).write_text("")
    with build_lock(tmp_path):
        assert not (tmp_path / TORCH_LOCK).exists()
        holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            from pytest_cudaagent.builds.fast_build import build_lock
            with build_lock({str(tmp_path)!r}):
                print("acquired", flush=True)
        """)], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        assert holder.poll() is None  # waits while this process holds the lock
    assert holder.communicate(timeout=60)[0].strip() == "acquired"


@pytest.mark.slow
def test_candidates_share_one_pch_and_keep_their_own_flags(tmp_path):
    cache_dir = default_cache_dir()
    implicit = write_candidate(tmp_path / "implicit.py", "implicit_row_sum", ROW_SUM_CPP, '["-O3", "-DROW_SCALE=1"]')
    variant = requested_variants(check_candidate(implicit), "cpu")[0]
    first = evaluate(PROBLEMS / "row_sum.py", implicit, cpu_config(cache_dir=cache_dir, fast_build=True))
    assert first.status == "passed", first.error
    # No evaluation waits for the PCH (fast_build.start_pch): this test does, for this process's
    # builder and for one of another test process that shares the cache.
    builder = fast_build._pch_builders.get(pch_dir(cache_dir))
    if builder is not None:
        builder.join(PCH_BUILD_TIMEOUT_S)
    ensure_pch(pch_dir(cache_dir), variant)
    builds = build_log_lines(cache_dir, variant.key())
    assert builds >= 1 and ready_pch(pch_dir(cache_dir), variant) is not None
    # A second candidate with its own -D flag: same header, not rebuilt, and its macro works.
    scaled = write_candidate(tmp_path / "scaled.py", "scaled_row_sum", ROW_SUM_CPP, '["-O3", "-DROW_SCALE=1.0"]')
    second = evaluate(PROBLEMS / "row_sum.py", scaled, cpu_config(cache_dir=cache_dir, fast_build=True))
    assert second.status == "passed", second.error
    assert build_log_lines(cache_dir, variant.key()) == builds
    ninja = check_candidate(scaled).extensions_dir(cache_dir) / "scaled_row_sum" / "build.ninja"
    assert f"-include {pch_dir(cache_dir) / variant.key() / PCH_HEADER}" in ninja.read_text()


@pytest.mark.slow
def test_a_pch_cut_short_is_rebuilt():
    root = pch_dir(default_cache_dir())
    variant = pch_variant(["-O3"], False)
    ensure_pch(root, variant)
    gch = root / variant.key() / f"{PCH_HEADER}.gch"
    with open(gch, "r+b") as handle:
        handle.truncate(gch.stat().st_size // 2)
    assert ready_pch(root, variant) is None
    builds = build_log_lines(default_cache_dir(), variant.key())
    assert ensure_pch(root, variant) == root / variant.key() / PCH_HEADER
    assert build_log_lines(default_cache_dir(), variant.key()) == builds + 1
    assert ready_pch(root, variant) is not None


def test_compiler_errors_stay_readable():
    result = evaluate(PROBLEMS / "leaky_relu.py", TEST_CANDIDATES / "build_error.py", cpu_config())
    assert result.status == "build_error"
    assert "main.cpp:2" in result.error and "error:" in result.error, result.error


@pytest.mark.slow
def test_a_build_killed_midway_then_run_again_gives_a_working_extension(tmp_path):
    candidate = write_candidate(tmp_path / "killed.py", "killed_row_sum", ROW_SUM_CPP, '["-O3", "-DROW_SCALE=1"]')
    build_dir = check_candidate(candidate).extensions_dir(default_cache_dir()) / "killed_row_sum"
    shutil.rmtree(build_dir, ignore_errors=True)  # the shared test cache may hold an earlier run's build
    # The worker's build, in its own process group so the kill takes the compiler too.
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from pytest_cudaagent.builds.fast_build import install, pch_dir
        from pytest_cudaagent.core.files import import_file
        os.environ["TORCH_EXTENSIONS_DIR"] = {str(build_dir.parent)!r}
        install(pch_dir(Path({str(default_cache_dir())!r})))
        import torch
        module = import_file({str(candidate)!r}, "killed")
        print(module.extension.row_sum(torch.ones(3, 4)).tolist(), flush=True)
    """)
    builder = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 300
    while not (build_dir / "build.ninja").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)  # the compiler is running
    os.killpg(builder.pid, signal.SIGKILL)
    builder.wait()
    assert (build_dir / "build.ninja").exists() and not (build_dir / "killed_row_sum.so").exists()
    rerun = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert rerun.stdout.strip().splitlines()[-1] == "[4.0, 4.0, 4.0]"


def test_evaluation_with_a_stale_torch_lock_proceeds():
    candidate = check_candidate(CPU_CANDIDATES / "leaky_relu.py")
    build_dir = candidate.extensions_dir(default_cache_dir()) / "example_cpu_leaky_relu"
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / TORCH_LOCK).write_text("")  # as a build killed with SIGKILL leaves it
    result = evaluate(PROBLEMS / "leaky_relu.py", candidate.path, cpu_config(build_timeout_s=600))
    assert result.status == "passed", result.error


def test_a_timed_out_pch_build_leaves_no_compiler_running(monkeypatch, tmp_path):
    monkeypatch.setattr(fast_build, "PCH_BUILD_TIMEOUT_S", 1.0)
    pid_file = tmp_path / "grandchild.pid"
    # As gcc's driver runs cc1plus: the process that does the work is a child of the one started.
    with pytest.raises(subprocess.TimeoutExpired):
        fast_build._run_compiler(["sh", "-c", f"sleep 120 & echo $! > {pid_file}; wait"])
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while running(grandchild):
        assert time.monotonic() < deadline, "the compiler's child outlived the timeout"
        time.sleep(0.1)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_shared_header_goes_only_to_sources_that_include_all_of_torch_extension_h(tmp_path):
    """Forced into a binding that includes torch/types.h and pybind only, the PCH made it slower
    (H100: 16.4 -> 22.8 s); load_inline's own main.cpp includes torch/extension.h unless told not to."""
    # The bundled candidates: no_implicit_headers=True, torch/types.h and pybind: a PCH of those two.
    for name in ("row_sum.py", "leaky_relu.py"):
        variants = requested_variants(check_candidate(CPU_CANDIDATES / name), "cpu")
        assert [variant.headers for variant in variants] == [fast_build.TYPES_PYBIND_HEADERS], name
    explicit = tmp_path / "explicit.py"
    explicit.write_text(textwrap.dedent('''
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        SOURCE = "#include <torch/extension.h>\\ntorch::Tensor f(torch::Tensor x) { return x; }"
        TYPES = "#include <torch/types.h>\\ntorch::Tensor g(torch::Tensor x) { return x; }"
        with_it = load_inline("with_it", cpp_sources=[SOURCE], no_implicit_headers=True, extra_cflags=["-O2"])
        without = load_inline("without", cpp_sources=TYPES, no_implicit_headers=True, extra_cflags=["-O1"])
        computed = load_inline("computed", cpp_sources=[TYPES + ""], no_implicit_headers=True, extra_cflags=["-O0"])


        class ModelNew(nn.Module):
            pass
    '''))
    levels = sorted(variant.cflags[-1] for variant in requested_variants(check_candidate(explicit), "cpu"))
    assert levels == ["-O0", "-O2"]  # a computed source may include it: built, the worker decides
    # The worker reads what torch wrote: C++ sources only, the include at the start of a line.
    (tmp_path / "main.cpp").write_text("#include <torch/types.h>\n// #include <torch/extension.h>\n")
    (tmp_path / "kernel.cu").write_text("#include <torch/extension.h>\n")
    (tmp_path / "binding.cpp").write_text("  #  include \"torch/extension.h\"\n")
    extension = fast_build.EXTENSION_HEADERS
    assert fast_build.pch_headers([tmp_path / "main.cpp", tmp_path / "kernel.cu", tmp_path / "missing.cpp"]) != extension
    assert fast_build.pch_headers([tmp_path / "main.cpp", tmp_path / "binding.cpp"]) == extension


@pytest.mark.parametrize(("text", "opens"), [
    ("#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\nint f();\n", True),
    ("// binding\n/* block\ncomment */\n\n#include <algorithm>\n#include <vector>\n#include \"torch/types.h\"\n"
     "#include <torch/csrc/utils/pybind.h>  // bindings\n", True),
    ("#include <torch/csrc/utils/pybind.h>\n#include <torch/types.h>\n", False),  # the other order
    ("#define SCALE 2\n#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n", False),  # a macro first
    ("#include <cuda_runtime.h>\n#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n", False),
    ("#include <torch/types.h>\nint x;\n#include <torch/csrc/utils/pybind.h>\n", False),  # code between
])
def test_a_binding_gets_the_types_and_pybind_pch_only_when_those_two_open_it(text, opens):
    """-include of the PCH puts the two headers first; a source that opens with them (standard
    library headers aside, which torch's include themselves) means the same that way."""
    assert fast_build.opens_with_types_and_pybind(text) is opens


def test_pch_headers_of_a_build_are_those_every_cpp_source_opens_with(tmp_path):
    binding = "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n"
    (tmp_path / "a.cpp").write_text(binding + "int a();\n")
    (tmp_path / "b.cpp").write_text(binding + "int b();\n")
    (tmp_path / "c.cpp").write_text("#include <torch/types.h>\nint c();\n")
    (tmp_path / "k.cu").write_text("#include <torch/extension.h>\n")  # nvcc's: never the PCH's business
    (tmp_path / "e.cpp").write_text("#include <torch/extension.h>\n")
    assert fast_build.pch_headers([tmp_path / "a.cpp", tmp_path / "b.cpp", tmp_path / "k.cu"]) == \
        fast_build.TYPES_PYBIND_HEADERS
    assert fast_build.pch_headers([tmp_path / "a.cpp", tmp_path / "c.cpp"]) is None
    assert fast_build.pch_headers([tmp_path / "a.cpp", tmp_path / "e.cpp"]) == fast_build.EXTENSION_HEADERS


def test_a_header_set_is_part_of_the_pchs_key_and_torch_extension_hs_key_is_as_before():
    extension = pch_variant(["-O3"], False)
    assert extension.headers == fast_build.EXTENSION_HEADERS
    assert pch_variant(["-O3"], False, fast_build.EXTENSION_HEADERS).key() == extension.key()
    assert pch_variant(["-O3"], False, fast_build.TYPES_PYBIND_HEADERS).key() != extension.key()


@pytest.mark.slow
def test_a_types_and_pybind_binding_builds_with_its_own_pch(tmp_path):
    """The bundled CPU row_sum (torch/types.h and pybind, no_implicit_headers=True): its PCH holds
    exactly those two, its ninja file -includes it, and it passes."""
    cache_dir = tmp_path / "cache"
    candidate = check_candidate(CPU_CANDIDATES / "row_sum.py")
    [variant] = requested_variants(candidate, "cpu")
    header = ensure_pch(pch_dir(cache_dir), variant)
    assert header.read_text() == "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n"
    result = evaluate(PROBLEMS / "row_sum.py", CPU_CANDIDATES / "row_sum.py",
                      cpu_config(cache_dir=cache_dir, fast_build=True))
    assert result.status == "passed", result.error
    ninja = next(candidate.extensions_dir(cache_dir).rglob("build.ninja")).read_text()
    assert f"-include {header}" in ninja


def test_a_build_runs_below_the_workers_priority_and_its_compilers_too(monkeypatch, tmp_path):
    """The build's thread, and every process it starts, run BUILD_NICENESS levels lower; the
    worker's own thread keeps its priority for the timed calls that follow; the build's value
    and its errors come back unchanged."""
    from torch.utils import cpp_extension

    from pytest_cudaagent.core.config import BUILD_NICENESS

    seen = {}

    def fake_jit_compile(name, sources, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths,
                         build_directory, verbose, with_cuda, is_python_module, is_standalone, keep_intermediates=True):
        seen["thread"] = os.getpriority(os.PRIO_PROCESS, 0)
        seen["compiler"] = int(subprocess.check_output(["nice"], text=True))  # what a compiler it starts runs at
        if name == "broken":
            raise RuntimeError("Error building extension 'broken': main.cpp:2: error: expected ';'")
        return f"module {name}"

    monkeypatch.setattr(cpp_extension, "_jit_compile", fake_jit_compile)
    fast_build.install(None, split=False)
    before = os.getpriority(os.PRIO_PROCESS, 0)
    if before >= 19:
        pytest.skip("this process already runs at the lowest priority")
    expected = min(19, before + BUILD_NICENESS)
    arguments = dict(sources=[], extra_cflags=None, extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                     build_directory=str(tmp_path), verbose=False, with_cuda=False, is_python_module=True,
                     is_standalone=False)
    assert cpp_extension._jit_compile("ok", **arguments) == "module ok"
    assert seen == {"thread": expected, "compiler": expected} and expected > before
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
    with pytest.raises(RuntimeError, match="main.cpp:2: error"):
        cpp_extension._jit_compile("broken", **arguments)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


@pytest.fixture
def fresh_torch_flags():
    fast_build.torch_cxx_cflags.cache_clear()
    fast_build.torch_cxx_standard.cache_clear()
    yield
    fast_build.torch_cxx_cflags.cache_clear()
    fast_build.torch_cxx_standard.cache_clear()


def test_the_pch_is_built_with_the_flags_torchs_own_ninja_file_gives_a_cpp_source(monkeypatch, fresh_torch_flags):
    """gcc silently ignores a PCH built under other flags: torch 2.11 (the H100 machine's)
    compiles extensions as C++17, 2.13 as C++20, so the flags come from the ninja file this torch
    writes, never from a list of ours."""
    import functools
    import re

    from torch.utils import cpp_extension

    variant = pch_variant([], with_cuda=False)
    assert variant is not None and variant.cflags == fast_build.torch_cxx_cflags()
    assert any(flag.startswith("-std=") for flag in variant.cflags)
    original = cpp_extension._write_ninja_file_to_build_library

    @functools.wraps(original)  # the same parameters
    def another_torch(path, **arguments):
        original(path=path, **arguments)
        Path(path).write_text(re.sub(r"-std=c\+\+\d+", "-std=c++14", Path(path).read_text()))

    monkeypatch.setattr(cpp_extension, "_write_ninja_file_to_build_library", another_torch)
    fast_build.torch_cxx_cflags.cache_clear()
    fast_build.torch_cxx_standard.cache_clear()
    older = pch_variant(["-O3"], with_cuda=False)
    assert "-std=c++14" in older.cflags and [f for f in older.cflags if f.startswith("-std=")] == ["-std=c++14"]


@pytest.mark.slow
def test_the_candidate_builds_while_the_pch_is_made_and_nobody_waits_for_it(tmp_path, monkeypatch):
    """A PCH takes about as long as a plain build: the first candidate of a fresh cache does not
    wait for it (it builds the plain way meanwhile), its evaluation ends without waiting for it
    either, and a second evaluation meanwhile starts no second builder."""
    cache_dir = tmp_path / "cache"
    candidate = write_candidate(tmp_path / "meanwhile.py", "meanwhile_row_sum", ROW_SUM_CPP, '["-O3", "-DROW_SCALE=1"]')
    extensions = check_candidate(candidate).extensions_dir(cache_dir)
    seen = {"calls": 0}
    release = threading.Event()

    def slow_pch(found, cache, device):
        seen["calls"] += 1
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not list(extensions.rglob("*.so")):
            time.sleep(0.2)
        seen["candidate_built_first"] = bool(list(extensions.rglob("*.so")))
        release.wait(300)
        seen["pch_done"] = time.monotonic()

    monkeypatch.setattr(fast_build, "prepare_pch", slow_pch)
    try:
        result = evaluate(PROBLEMS / "row_sum.py", candidate,
                          cpu_config(cache_dir=cache_dir, fast_build=True, timing=False))
        again = evaluate(PROBLEMS / "row_sum.py", candidate,
                         cpu_config(cache_dir=cache_dir, fast_build=True, timing=False))
        assert result.status == again.status == "passed", result.error
        assert "pch_done" not in seen and seen["candidate_built_first"] is True
        assert seen["calls"] == 1
        builder = fast_build._pch_builders[fast_build.pch_dir(cache_dir)]
        assert builder.is_alive() and not builder.daemon  # the process waits for it at its exit
    finally:
        release.set()
    builder.join(60)
    assert "pch_done" in seen


def test_a_pch_another_process_is_building_is_not_waited_for(tmp_path):
    """Only one builder per PCH; the others go on without it (wait=False) or wait (the default)."""
    variant = pch_variant(["-O3"], False)
    root = tmp_path / "pch"
    holder = subprocess.Popen([sys.executable, "-c", f"""
import fcntl, sys, time
from pathlib import Path
Path({str(root)!r}).mkdir(parents=True, exist_ok=True)
handle = open(Path({str(root)!r}) / {variant.key() + ".lock"!r}, "a+")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        assert ensure_pch(root, variant, wait=False) is None
        assert time.monotonic() - started < 5
    finally:
        holder.kill()
        holder.wait()


def test_a_torch_whose_ninja_writer_cannot_be_called_gets_no_pch(monkeypatch, fresh_torch_flags):
    from torch.utils import cpp_extension

    def changed_writer(path, name, sources, a_parameter_we_do_not_know):
        raise AssertionError("not called with what it needs")

    monkeypatch.setattr(cpp_extension, "_write_ninja_file_to_build_library", changed_writer)
    assert fast_build.torch_cxx_standard() is None
    assert pch_variant(["-O3"], with_cuda=False) is None


# -- the binding in the .cu compiled in load_inline's bare main.cpp (binding_to_main) ----------

BINDING_IN_CU = """#include <torch/extension.h>
__global__ void k(float* y) { y[threadIdx.x] = 0.f; }
torch::Tensor zero(torch::Tensor y) { k<<<1, 32>>>(y.data_ptr<float>()); return y; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("zero", &zero); }
"""


def _fake_builds(monkeypatch, tmp_path, fail_moved: bool = False, fail_lean: bool = False, flags: list | None = None,
                 lean_error: str = "Error building extension 'ext': the binding needs kThreads"):
    """load_inline's files in a build directory, and torch's _jit_compile replaced by one that
    records what main.cpp and the nvcc wrapper's variable held when it ran (and its C++ flags
    into `flags`). `fail_moved`: every build of a moved binding fails; `fail_lean`: its lean
    copy's (or a lean main.cpp's), with `lean_error` as torch's message."""
    from torch.utils import cpp_extension

    from pytest_cudaagent.builds import split_nvcc

    seen = []

    def jit_compile(name, sources, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths,
                    build_directory, verbose, with_cuda, is_python_module, is_standalone, keep_intermediates=True):
        moved = os.environ.get(split_nvcc.BINDING_IN_MAIN_ENV)
        main_text = Path(sources[0]).read_text()
        seen.append((main_text, moved))
        if flags is not None:
            flags.append(list(extra_cflags or []))
        if fail_moved and moved:
            raise RuntimeError("Error building extension 'ext': the binding needs kThreads")
        if fail_lean and header_diet.BINDING_HEADER in main_text:
            raise RuntimeError(lean_error)
        return "module"

    monkeypatch.setattr(cpp_extension, "CUDA_HOME", cpp_extension.CUDA_HOME or "/usr/local/cuda")
    monkeypatch.setattr(cpp_extension, "_jit_compile", jit_compile)
    return seen


def _call(tmp_path, main_text=fast_build.BARE_MAIN + "\n", cuda_text=BINDING_IN_CU, cuda_files=1, extra_cflags=None):
    from torch.utils import cpp_extension

    (tmp_path / "main.cpp").write_text(main_text)
    sources = [str(tmp_path / "main.cpp")]
    for index in range(cuda_files):
        (tmp_path / f"cuda{index or ''}.cu").write_text(cuda_text)
        sources.append(str(tmp_path / f"cuda{index or ''}.cu"))
    return cpp_extension._jit_compile(name="ext", sources=sources, extra_cflags=extra_cflags, extra_cuda_cflags=None,
                                      extra_ldflags=None, extra_include_paths=None, build_directory=str(tmp_path),
                                      verbose=False, with_cuda=True, is_python_module=True, is_standalone=False)


def test_a_cu_with_its_binding_gets_it_compiled_in_main_cpp_for_the_build(monkeypatch, tmp_path, nvcc_environment):
    from pytest_cudaagent.builds import split_nvcc

    seen = _fake_builds(monkeypatch, tmp_path)
    fast_build.install(None, split=True, diet=True)
    assert _call(tmp_path) == "module"
    (main_text, moved), = seen
    assert moved == str((tmp_path / "cuda.cu").resolve())
    # Its lean copy: ATen's Tensor and torch's pybind, not torch/extension.h.
    assert "#include <torch/csrc/utils/pybind.h>" in main_text and "torch/extension.h" not in main_text
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in main_text
    assert "torch::Tensor zero(torch::Tensor y)\n;" in main_text  # the declaration of what it calls
    # After the build: main.cpp as load_inline wrote it, the wrapper told nothing.
    assert (tmp_path / "main.cpp").read_text() == fast_build.BARE_MAIN + "\n"
    assert split_nvcc.BINDING_IN_MAIN_ENV not in os.environ


def test_a_moved_binding_that_does_not_build_is_built_as_written_and_not_tried_again(monkeypatch, tmp_path,
                                                                                     nvcc_environment):
    """Its lean copy, then on torch/extension.h, then as written; the next build as written at once."""
    seen = _fake_builds(monkeypatch, tmp_path, fail_moved=True)
    fast_build.install(None, split=True, diet=True)
    assert _call(tmp_path) == "module"
    assert [moved is not None for _, moved in seen] == [True, True, False]
    assert header_diet.BINDING_HEADER in seen[0][0]
    assert seen[1][0].startswith(fast_build.BARE_MAIN) and "PYBIND11_MODULE" in seen[1][0]
    assert seen[2][0] == fast_build.BARE_MAIN + "\n"
    assert (tmp_path / fast_build.BINDING_REFUSED).exists()
    assert _call(tmp_path) == "module" and [moved is not None for _, moved in seen] == [True, True, False, False]


def _ready_pchs(monkeypatch, ready: tuple) -> dict:
    """Shared PCHs ready in the cache for the header sets in `ready` (any flags): the header path
    each would be -included by."""
    paths = {headers: f"/cache/pch/{'lean' if headers == header_diet.LEAN_BINDING_HEADERS else 'extension'}/"
                      f"{fast_build.PCH_HEADER}" for headers in ready}
    monkeypatch.setattr(fast_build, "pch_variant", lambda flags, with_cuda, headers=fast_build.EXTENSION_HEADERS: headers)
    monkeypatch.setattr(fast_build, "ready_pch", lambda root, headers: Path(paths[headers]) if headers in paths else None)
    return paths


def test_a_lean_binding_that_does_not_build_is_built_on_torch_extension_h_with_the_shared_pch(
        monkeypatch, tmp_path, nvcc_environment):
    """The lean copy is built with the lean binding's shared PCH, not torch/extension.h's (which
    holds all of it); where it fails, the binding on torch/extension.h is built with that one,
    still in main.cpp."""
    flags: list = []
    seen = _fake_builds(monkeypatch, tmp_path, fail_lean=True, flags=flags)
    pchs = _ready_pchs(monkeypatch, (fast_build.EXTENSION_HEADERS, header_diet.LEAN_BINDING_HEADERS))
    fast_build.install(tmp_path / "pch", split=True, diet=True)
    assert _call(tmp_path, extra_cflags=["-O3"]) == "module"
    assert [moved is not None for _, moved in seen] == [True, True]
    assert header_diet.BINDING_HEADER in seen[0][0] and seen[1][0].startswith(fast_build.BARE_MAIN)
    assert flags == [["-O3", "-include", pchs[header_diet.LEAN_BINDING_HEADERS]],
                     ["-O3", "-include", pchs[fast_build.EXTENSION_HEADERS]]]
    assert not (tmp_path / fast_build.BINDING_REFUSED).exists()


def test_a_lean_binding_with_no_lean_pch_ready_builds_with_its_flags_as_written(monkeypatch, tmp_path,
                                                                               nvcc_environment):
    """Only torch/extension.h's PCH in the cache (the lean one not built yet, or refused): the lean
    copy gets neither."""
    flags: list = []
    seen = _fake_builds(monkeypatch, tmp_path, flags=flags)
    _ready_pchs(monkeypatch, (fast_build.EXTENSION_HEADERS,))
    fast_build.install(tmp_path / "pch", split=True, diet=True)
    assert _call(tmp_path, extra_cflags=["-O3"]) == "module"
    assert header_diet.BINDING_HEADER in seen[0][0] and flags == [["-O3"]]


def test_the_lean_bindings_pch_opens_as_every_lean_binding_does():
    """The PCH is -included before main.cpp's own lines: it must hold what a lean binding opens
    with, in that order, and nothing the binding does not include."""
    from torch.utils import cpp_extension

    lean, why = header_diet.lean_binding(
        '#include <torch/extension.h>\ntorch::Tensor zero(torch::Tensor y);\n'
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("zero", &zero); }\n',
        "/src/main.cpp", cpp_extension.include_paths())
    assert why is None
    included = [line.split("<")[1].rstrip(">") for line in lean.splitlines() if line.startswith("#include <")]
    opening = [header for header in included if header in header_diet.LEAN_BINDING_HEADERS]
    assert opening == list(header_diet.LEAN_BINDING_HEADERS) == included[:3] + included[-1:]


def test_a_load_inline_whose_cuda_source_writes_its_binding_asks_for_the_lean_bindings_pch(tmp_path, monkeypatch):
    """Read from the source before it runs (fast_build.prepare_pch builds what is asked): the CUDA
    source a module constant or a literal; a .cu without PYBIND11_MODULE, or a CPU build, asks
    for torch/extension.h's PCH only."""
    from torch.utils import cpp_extension

    # A CPU build of torch finds no CUDA home of its own (the include paths of a CUDA build).
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", cpp_extension.CUDA_HOME or "/usr/local/cuda")
    def candidate(name: str, cuda: str, with_cuda: str = "") -> Path:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(f"""
            import torch
            from torch.utils.cpp_extension import load_inline
            SOURCE = {cuda!r}
            ext = load_inline("{name}", cpp_sources="", cuda_sources=SOURCE, functions=None,
                              extra_cflags=["-O3"]{with_cuda})
            class ModelNew(torch.nn.Module):
                def forward(self, x):
                    return ext.zero(x)
        """))
        return path

    binds = requested_variants(check_candidate(candidate("binds", BINDING_IN_CU)), "cuda")
    assert [variant.headers for variant in binds] == [fast_build.EXTENSION_HEADERS, header_diet.LEAN_BINDING_HEADERS]
    assert binds[1].cflags[-1] == "-O3"
    kernels_only = BINDING_IN_CU.replace('PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("zero", &zero); }', "")
    assert [variant.headers for variant in requested_variants(check_candidate(candidate("kernels", kernels_only)),
                                                              "cuda")] == [fast_build.EXTENSION_HEADERS]
    on_cpu = candidate("on_cpu", BINDING_IN_CU, with_cuda=", with_cuda=False")
    assert [variant.headers for variant in requested_variants(check_candidate(on_cpu), "cuda")] == \
        [fast_build.EXTENSION_HEADERS]


@pytest.mark.parametrize(("case", "binding_names"), [
    ("a module of torch's C++ frontend", "torch::nn::Module"),
    ("a THP function", "THPVariable_Wrap"),
    ("a using-directive of torch", "using namespace torch"),
])
def test_a_binding_naming_what_the_lean_headers_leave_out_is_built_on_torch_extension_h(
        monkeypatch, tmp_path, nvcc_environment, case, binding_names):
    seen = _fake_builds(monkeypatch, tmp_path)
    fast_build.install(None, split=True, diet=True)
    block = 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("zero", &zero); }'
    named = {"torch::nn::Module": 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("zero", &zero); '
                                  'm.attr("kind") = sizeof(torch::nn::Module); }',
             "THPVariable_Wrap": 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("zero", &zero); '
                                 'm.attr("wrap") = (size_t)&THPVariable_Wrap; }',
             "using namespace torch": "using namespace torch;\n" + block}[binding_names]
    assert _call(tmp_path, cuda_text=BINDING_IN_CU.replace(block, named)) == "module"
    (main_text, moved), = seen
    assert moved is not None and main_text.startswith(fast_build.BARE_MAIN), case
    assert header_diet.BINDING_HEADER not in main_text, case


@pytest.mark.parametrize(("case", "kwargs"), [
    ("a C++ source of its own (functions=[...])", {"main_text": fast_build.BARE_MAIN + "\ntorch::Tensor zero(torch::Tensor y);\n"}),
    ("two .cu sources", {"cuda_files": 2}),
    ("a binding the split refuses", {"cuda_text": BINDING_IN_CU.replace("torch::Tensor zero", "static torch::Tensor zero")}),
    ("no binding in the .cu", {"cuda_text": BINDING_IN_CU.split("PYBIND11_MODULE")[0]}),
])
def test_a_build_the_move_does_not_fit_is_left_as_written(monkeypatch, tmp_path, nvcc_environment, case, kwargs):
    seen = _fake_builds(monkeypatch, tmp_path)
    fast_build.install(None, split=True, diet=True)
    assert _call(tmp_path, **kwargs) == "module"
    assert seen[0][1] is None, case


def test_a_main_cpp_of_the_candidates_own_is_never_touched(monkeypatch, tmp_path, nvcc_environment):
    """load() of the candidate's own files: its main.cpp is not in the build directory."""
    from torch.utils import cpp_extension

    seen = _fake_builds(monkeypatch, tmp_path)
    fast_build.install(None, split=True, diet=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "main.cpp").write_text(fast_build.BARE_MAIN + "\n")
    (workspace / "cuda.cu").write_text(BINDING_IN_CU)
    (tmp_path / "build").mkdir()
    cpp_extension._jit_compile(name="ext", sources=[str(workspace / "main.cpp"), str(workspace / "cuda.cu")],
                               extra_cflags=None, extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                               build_directory=str(tmp_path / "build"), verbose=False, with_cuda=True,
                               is_python_module=True, is_standalone=False)
    assert seen == [(fast_build.BARE_MAIN + "\n", None)]


def test_without_the_header_diet_no_binding_is_moved(monkeypatch, tmp_path, nvcc_environment):
    seen = _fake_builds(monkeypatch, tmp_path)
    fast_build.install(None, split=True, diet=False)
    assert _call(tmp_path) == "module" and seen[0][1] is None


# -- load_inline's own main.cpp (functions=[...]) on its lean copy (lean_declared_main) -----------

KERNELS_ONLY = BINDING_IN_CU.split("PYBIND11_MODULE")[0]
# main.cpp as load_inline writes it for cpp_sources="torch::Tensor zero(torch::Tensor y);",
# functions=["zero"] (with_pytorch_error_handling, the default).
DECLARED_MAIN = (fast_build.BARE_MAIN + "\ntorch::Tensor zero(torch::Tensor y);\n"
                 "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                 'm.def("zero", torch::wrap_pybind_function(zero), "zero");\n}')


def test_load_inlines_own_main_cpp_is_built_on_its_lean_copy_with_the_lean_pch_and_put_back(
        monkeypatch, tmp_path, nvcc_environment):
    from pytest_cudaagent.builds import split_nvcc

    flags: list = []
    seen = _fake_builds(monkeypatch, tmp_path, flags=flags)
    pchs = _ready_pchs(monkeypatch, (fast_build.EXTENSION_HEADERS, header_diet.LEAN_BINDING_HEADERS))
    fast_build.install(tmp_path / "pch", split=True, diet=True)
    assert _call(tmp_path, main_text=DECLARED_MAIN, cuda_text=KERNELS_ONLY, extra_cflags=["-O3"]) == "module"
    (main_text, moved), = seen
    assert moved is None  # the .cu is compiled whole: nothing was moved out of it
    assert "torch/extension.h" not in main_text
    assert "#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>" in main_text
    assert 'm.def("zero", torch::wrap_pybind_function(zero), "zero");' in main_text
    assert flags == [["-O3", "-include", pchs[header_diet.LEAN_BINDING_HEADERS]]]
    assert (tmp_path / "main.cpp").read_text() == DECLARED_MAIN and split_nvcc.BINDING_IN_MAIN_ENV not in os.environ


def test_a_lean_main_cpp_that_fails_is_built_as_written_and_not_tried_again(monkeypatch, tmp_path, nvcc_environment):
    """ninja names main.o among the failed steps (or names none): main.cpp as written, with
    torch/extension.h's PCH; the next build in that directory as written at once."""
    flags: list = []
    seen = _fake_builds(monkeypatch, tmp_path, fail_lean=True, flags=flags,
                        lean_error="Error building extension 'ext': [1/2] c++ ...\nFAILED: [code=1] main.o \n"
                                   "main.cpp:9: error: 'wrap' is not a member of 'torch'")
    pchs = _ready_pchs(monkeypatch, (fast_build.EXTENSION_HEADERS, header_diet.LEAN_BINDING_HEADERS))
    fast_build.install(tmp_path / "pch", split=True, diet=True)
    assert _call(tmp_path, main_text=DECLARED_MAIN, cuda_text=KERNELS_ONLY, extra_cflags=["-O3"]) == "module"
    assert header_diet.BINDING_HEADER in seen[0][0] and seen[1][0] == DECLARED_MAIN
    assert flags[1] == ["-O3", "-include", pchs[fast_build.EXTENSION_HEADERS]]
    assert (tmp_path / fast_build.BINDING_REFUSED).exists()
    assert _call(tmp_path, main_text=DECLARED_MAIN, cuda_text=KERNELS_ONLY) == "module"
    assert [text == DECLARED_MAIN for text, _ in seen] == [False, True, True]


def test_a_build_whose_cu_alone_failed_is_not_built_again_with_main_cpp_as_written(monkeypatch, tmp_path,
                                                                                  nvcc_environment):
    """The .cu compiles the same whichever main.cpp: its failure is the build's, reported once."""
    seen = _fake_builds(monkeypatch, tmp_path, fail_lean=True,
                        lean_error="Error building extension 'ext': [1/3] nvcc ...\nFAILED: cuda.cuda.o \n"
                                   "cuda.cu(2): error: identifier \"undeclared_offset\" is undefined")
    fast_build.install(None, split=True, diet=True)
    with pytest.raises(RuntimeError, match="undeclared_offset"):
        _call(tmp_path, main_text=DECLARED_MAIN, cuda_text=KERNELS_ONLY)
    assert len(seen) == 1 and (tmp_path / "main.cpp").read_text() == DECLARED_MAIN
    assert not (tmp_path / fast_build.BINDING_REFUSED).exists()


@pytest.mark.parametrize(("case", "main_text", "cuda_files"), [
    ("a C++ build: its kernels are main.cpp's own", DECLARED_MAIN, 0),
    ("no module load_inline wrote (functions=None)", fast_build.BARE_MAIN + "\ntorch::Tensor zero(torch::Tensor y);\n", 1),
    ("a name of torch's C++ frontend", DECLARED_MAIN.replace("torch::Tensor zero(torch::Tensor y);",
                                                             "torch::nn::Linear layer{nullptr};\ntorch::Tensor zero(torch::Tensor y);"), 1),
    ("a using-directive of torch", DECLARED_MAIN.replace(fast_build.BARE_MAIN + "\n",
                                                         fast_build.BARE_MAIN + "\nusing namespace torch;\n"), 1),
])
def test_a_main_cpp_the_lean_copy_does_not_fit_is_compiled_as_written(monkeypatch, tmp_path, nvcc_environment,
                                                                     case, main_text, cuda_files):
    seen = _fake_builds(monkeypatch, tmp_path)
    fast_build.install(None, split=True, diet=True)
    assert _call(tmp_path, main_text=main_text, cuda_text=KERNELS_ONLY, cuda_files=cuda_files) == "module"
    assert seen == [(main_text, None)], case


def test_without_the_header_diet_main_cpp_is_compiled_as_written(monkeypatch, tmp_path, nvcc_environment):
    seen = _fake_builds(monkeypatch, tmp_path)
    fast_build.install(None, split=True, diet=False)
    assert _call(tmp_path, main_text=DECLARED_MAIN, cuda_text=KERNELS_ONLY) == "module"
    assert seen == [(DECLARED_MAIN, None)]


@pytest.mark.parametrize("functions", ['functions=["zero"]', '["zero"]'])
def test_a_load_inline_that_binds_functions_asks_for_the_lean_bindings_pch(tmp_path, monkeypatch, functions):
    """By keyword or as load_inline's fourth argument; functions=None with kernels only does not ask."""
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "CUDA_HOME", cpp_extension.CUDA_HOME or "/usr/local/cuda")
    path = tmp_path / "declared.py"
    call = (f'load_inline("declared", "torch::Tensor zero(torch::Tensor y);", KERNELS, {functions}, extra_cflags=["-O3"])'
            if not functions.startswith("functions") else
            f'load_inline("declared", cpp_sources="torch::Tensor zero(torch::Tensor y);", cuda_sources=KERNELS, '
            f'{functions}, extra_cflags=["-O3"])')
    path.write_text(textwrap.dedent(f"""
        import torch
        from torch.utils.cpp_extension import load_inline
        KERNELS = {KERNELS_ONLY!r}
        ext = {call}
        class ModelNew(torch.nn.Module):
            def forward(self, x):
                return ext.zero(x)
    """))
    variants = requested_variants(check_candidate(path), "cuda")
    assert [variant.headers for variant in variants] == [fast_build.EXTENSION_HEADERS, header_diet.LEAN_BINDING_HEADERS]
