"""split_nvcc.py: nvcc's host and device front ends side by side, with nvcc's object, output and
exit status; the real nvcc for any plan it does not know. Real nvcc runs (no GPU needed)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cudaagent.builds import fast_build, split_nvcc

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
SCRIPT = Path(split_nvcc.__file__).resolve()
ROOT = Path(__file__).resolve().parents[2]

WITH_WARNINGS = r"""
#include <cstdio>
template <class T> __global__ void scale(T* x, T by) { x[threadIdx.x] *= by; }
__global__ void unused_local(float* x) { int never_read; }
void launch(float* x) { int unused; scale<float><<<1, 32>>>(x, 2.0f); printf("launched\n"); }
"""
HOST_FRONT_END_ERROR = "__global__ void k(float* x) { x[0] = undeclared; }\n"
HOST_CALLS_DEVICE = "__device__ int g() { return 1; }\nvoid h() { int z = g(); }\n"
# Only the device front end instantiates the kernel's body for T=float: cicc reports it.
DEVICE_ONLY_ERROR = ("template <class T> __global__ void k(T* x) { x[0] = T::nope; }\n"
                     "void h() { k<float><<<1, 1>>>(0); }\n")


@pytest.fixture(autouse=True)
def split_even_when_busy(monkeypatch):
    """The tests compare the split path with nvcc's: they must not take nvcc's path because the
    test machine happens to be busy (the tests of that choice set the variable themselves)."""
    monkeypatch.setenv(split_nvcc.SPLIT_WHEN_BUSY_ENV, "1")


def normalised(path: Path) -> bytes | None:
    """An object without nvcc's temporary file names (they carry a process id, so two runs of
    nvcc itself differ there and nowhere else)."""
    return re.sub(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}", b"tmpxft", path.read_bytes()) if path.exists() else None


def compile_both(tmp_path: Path, source: str, flags: list[str]) -> tuple[dict, dict, dict]:
    """(nvcc's run, split_nvcc's run, split_nvcc's log line) of one -c compile."""
    (tmp_path / "kernel.cu").write_text(source)
    log = tmp_path / "nvcc.jsonl"
    runs = {}
    for name, command in (("nvcc", [NVCC]), ("split", [sys.executable, str(SCRIPT)])):
        output = tmp_path / f"{name}.o"
        completed = subprocess.run([*command, *flags, "-c", "kernel.cu", "-o", output.name], cwd=tmp_path,
                                   capture_output=True, text=True, env={**os.environ, split_nvcc.LOG_ENV: str(log)})
        runs[name] = {"returncode": completed.returncode, "stdout": completed.stdout, "stderr": completed.stderr,
                      "object": normalised(output)}
    return runs["nvcc"], runs["split"], json.loads(log.read_text().splitlines()[-1])


def test_a_clean_build_runs_split_and_gives_nvccs_object_and_warnings(tmp_path):
    nvcc, split, log = compile_both(tmp_path, WITH_WARNINGS, ["-O3", "-Xcompiler", "-Wall"])
    assert log["path"] == "split" and set(log["seconds"]) == {"host", "device", "rest"}
    assert split == nvcc
    assert nvcc["returncode"] == 0 and nvcc["object"] is not None
    assert split["stderr"].count('variable "never_read" was declared but never referenced') == 1


@pytest.mark.parametrize(("source", "message"), [
    (HOST_FRONT_END_ERROR, 'identifier "undeclared" is undefined'),
    (HOST_CALLS_DEVICE, 'calling a __device__ function("g()") from a __host__ function("h") is not allowed'),
    (DEVICE_ONLY_ERROR, 'detected during instantiation of "void k(T *) [with T=float]"'),
], ids=["host-front-end", "host-calls-device", "device-only"])
def test_a_compile_error_reads_and_exits_as_nvccs(tmp_path, source, message):
    nvcc, split, log = compile_both(tmp_path, source, [])
    assert log["path"] == "split"
    assert split == nvcc
    assert split["returncode"] != 0 and split["object"] is None
    assert message in split["stderr"] and split["stderr"].count("error detected in the compilation") == 1


def test_several_architectures_still_split(tmp_path):
    flags = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]
    nvcc, split, log = compile_both(tmp_path, WITH_WARNINGS, flags)
    assert log["path"] == "split"
    assert split == nvcc and nvcc["returncode"] == 0


@pytest.mark.parametrize("flags", [["-rdc=true"], ["--threads", "2", "-gencode", "arch=compute_80,code=sm_80",
                                                   "-gencode", "arch=compute_90,code=compute_90"]],
                         ids=["relocatable-device-code", "threaded-multi-arch"])
def test_a_plan_it_does_not_know_is_nvccs_own(tmp_path, flags):
    nvcc, split, log = compile_both(tmp_path, WITH_WARNINGS, flags)
    assert log["path"] == "nvcc" and log["reason"].startswith("nvcc's plan: ")
    assert split == nvcc and nvcc["returncode"] == 0


@pytest.mark.parametrize("source", [WITH_WARNINGS, HOST_FRONT_END_ERROR], ids=["clean", "error"])
@pytest.mark.parametrize("depfile_flags", [["-MD", "-MF"], ["--generate-dependencies-with-compile", "--dependency-output"]],
                         ids=["torch's -MD -MF", "long"])
def test_torchs_depfile_is_written_beside_the_split_compile(tmp_path, source, depfile_flags):
    """torch's ninja file asks for a depfile with the compile (a step of nvcc's plan only nvcc
    can run): split_nvcc writes it with `nvcc -M` beside the split compile, the same file."""
    runs = {}
    for name, command in (("nvcc", [NVCC]), ("split", [sys.executable, str(SCRIPT)])):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "kernel.cu").write_text(source)
        completed = subprocess.run(
            [*command, depfile_flags[0], depfile_flags[1], "kernel.o.d", "-c", "kernel.cu", "-o", "kernel.o"],
            cwd=folder, capture_output=True, text=True,
            env={**os.environ, split_nvcc.LOG_ENV: str(tmp_path / "nvcc.jsonl")})
        runs[name] = (completed.returncode, completed.stderr, normalised(folder / "kernel.o"),
                      (folder / "kernel.o.d").read_text().replace(str(folder), "DIR"))
    entry = json.loads((tmp_path / "nvcc.jsonl").read_text())
    assert entry["path"] == "split" and "dependencies" in entry["seconds"]
    assert runs["split"] == runs["nvcc"]
    assert runs["split"][3].startswith("kernel.o : kernel.cu")


@pytest.mark.parametrize("flags", [["-MD"], ["--generate-dependencies-with-compile"], ["-MMD", "-MF", "k.d"],
                                   ["-MD", "-MF", "k.d", "-MP"]],
                         ids=["no-MF", "no-dependency-output", "nonsystem", "phony-targets"])
def test_other_dependency_options_are_nvccs_own(flags):
    assert isinstance(split_nvcc.without_dependencies([*flags, "-c", "k.cu", "-o", "k.o"]), str)


def test_front_ends_that_name_the_module_differently_hand_the_build_to_nvcc(tmp_path, monkeypatch, capfd):
    (tmp_path / "kernel.cu").write_text(WITH_WARNINGS)
    log = tmp_path / "nvcc.jsonl"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(split_nvcc.LOG_ENV, str(log))
    monkeypatch.setattr(split_nvcc, "same_module_ids", lambda plan: False)
    assert split_nvcc.main(["-c", "kernel.cu", "-o", "split.o"]) == 0
    entry = json.loads(log.read_text())
    assert entry["path"] == "nvcc" and "module" in entry["reason"]
    # nvcc's own run printed the warning once (the split run's output was never replayed).
    assert capfd.readouterr().err.count('"never_read" was declared') == 1
    subprocess.run([NVCC, "-c", "kernel.cu", "-o", "nvcc.o"], check=True, capture_output=True)
    assert normalised(tmp_path / "split.o") == normalised(tmp_path / "nvcc.o")


def test_the_module_ids_are_compared_file_by_file(tmp_path):
    shared, own = tmp_path / "id", tmp_path / "id.device0"
    plan = split_nvcc.Plan({}, [], [], [], [(str(shared), str(own))])
    shared.write_text("_abc_7_cuda_cu_1")
    own.write_text("_abc_7_cuda_cu_1")
    assert split_nvcc.same_module_ids(plan)
    own.write_text("_abc_7_cuda_cu_2")
    assert not split_nvcc.same_module_ids(plan)
    own.unlink()
    assert not split_nvcc.same_module_ids(plan)


def test_install_makes_torchs_ninja_file_run_split_nvcc_and_keeps_a_users_own(monkeypatch, tmp_path,
                                                                               nvcc_environment):
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(Path(NVCC).resolve().parents[1]))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")  # no GPU here to take it from
    assert fast_build.install_nvcc_wrapper(split=True, diet=True)
    assert os.environ[split_nvcc.REAL_NVCC_ENV] == os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc")
    ninja = tmp_path / "build.ninja"
    (tmp_path / "k.cu").write_text(WITH_WARNINGS)
    cpp_extension._write_ninja_file_to_build_library(
        path=str(ninja), name="k", sources=[str(tmp_path / "k.cu")], extra_cflags=[], extra_cuda_cflags=[],
        extra_sycl_cflags=[], extra_ldflags=[], extra_include_paths=[], with_cuda=True, with_sycl=False,
        is_standalone=False)
    nvcc_line = next(line for line in ninja.read_text().splitlines() if line.startswith("nvcc = "))
    command = nvcc_line.removeprefix("nvcc = ")
    assert str(SCRIPT) in command and sys.executable in command
    compiled = subprocess.run(f"{command} -c k.cu -o k.o", shell=True, cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, split_nvcc.LOG_ENV: str(tmp_path / "nvcc.jsonl")})
    assert compiled.returncode == 0, compiled.stderr
    assert json.loads((tmp_path / "nvcc.jsonl").read_text())["path"] == "split"

    os.environ["PYTORCH_NVCC"] = "ccache nvcc"
    assert not fast_build.install_nvcc_wrapper(split=True, diet=True)
    assert os.environ["PYTORCH_NVCC"] == "ccache nvcc"


def test_evaluation_config_turns_it_off(monkeypatch, nvcc_environment):
    from torch.utils import cpp_extension

    from pytest_cudaagent.core.config import EvalConfig

    assert EvalConfig().split_nvcc and not EvalConfig.from_dict({**EvalConfig().to_dict(), "split_nvcc": False}).split_nvcc
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(Path(NVCC).resolve().parents[1]))
    monkeypatch.setattr(cpp_extension, "_jit_compile", cpp_extension._jit_compile)  # install wraps it: undone after
    fast_build.install(None, split=False)
    assert "PYTORCH_NVCC" not in os.environ
    fast_build.install(None, split=True)
    assert "split_nvcc.py" in os.environ["PYTORCH_NVCC"]


@pytest.mark.slow
def test_a_bundled_candidate_with_torchs_headers_and_flags_splits_to_the_same_object(tmp_path, nvcc_environment):
    """The bundled CUDA leaky ReLU's .cu through the ninja file torch writes for it (its flags,
    torch's headers): once with nvcc, once through split_nvcc; the same object."""
    script = f"""
import os, shutil, subprocess, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from experiments.build_speed import captured_build, stub_headers
from torch.utils import cpp_extension
cpp_extension.CUDA_HOME = str(Path(shutil.which("nvcc")).resolve().parents[1])
os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
scratch = Path(sys.argv[1])
build = captured_build(Path({str(ROOT / "examples/candidates/cuda/leaky_relu.py")!r}), scratch / "captured")
for name, nvcc in (("nvcc", None), ("split", sys.executable + " " + {str(SCRIPT)!r})):
    if nvcc:
        os.environ["PYTORCH_NVCC"] = nvcc
    directory = scratch / name
    directory.mkdir()
    cpp_extension._write_ninja_file_to_build_library(
        path=str(directory / "build.ninja"), name=build["name"], sources=build["sources"], extra_cflags=[],
        extra_cuda_cflags=build["extra_cuda_cflags"] or [], extra_sycl_cflags=[], extra_ldflags=[],
        extra_include_paths=[str(stub_headers(scratch))], with_cuda=True, with_sycl=False, is_standalone=False)
    subprocess.run(["ninja", "-C", str(directory), "cuda.cuda.o"], check=True, capture_output=True)
"""
    log = tmp_path / "nvcc.jsonl"
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=900,
                   env={**os.environ, split_nvcc.LOG_ENV: str(log)})
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["path"] for entry in entries] == ["split"], entries
    assert normalised(tmp_path / "split" / "cuda.cuda.o") == normalised(tmp_path / "nvcc" / "cuda.cuda.o")


@pytest.mark.parametrize(("load", "busy"), [((16, 16), False), ((17, 16), True), ((40, 16), True), ((1, 2), False),
                                            (None, False)])
def test_a_busy_machine_builds_with_nvccs_own_sequence(monkeypatch, load, busy):
    monkeypatch.delenv(split_nvcc.SPLIT_WHEN_BUSY_ENV)
    monkeypatch.setattr(split_nvcc, "machine_load", lambda: load)
    reason = split_nvcc.busy_reason()
    assert (reason is not None) == busy
    if busy:
        assert f"{load[0]} threads runnable on {load[1]} cores" in reason
    monkeypatch.setenv(split_nvcc.SPLIT_WHEN_BUSY_ENV, "1")
    assert split_nvcc.busy_reason() is None


def test_a_build_on_a_busy_machine_is_nvccs_and_says_why(tmp_path, monkeypatch, capfd):
    (tmp_path / "kernel.cu").write_text(WITH_WARNINGS)
    log = tmp_path / "nvcc.jsonl"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(split_nvcc.LOG_ENV, str(log))
    monkeypatch.delenv(split_nvcc.SPLIT_WHEN_BUSY_ENV)
    monkeypatch.setattr(split_nvcc, "machine_load", lambda: (64, 16))
    monkeypatch.setattr(split_nvcc, "dry_run", lambda *_: pytest.fail("a busy machine gets no dry run"))
    assert split_nvcc.main(["-c", "kernel.cu", "-o", "busy.o"]) == 0
    entry = json.loads(log.read_text())
    assert entry["path"] == "nvcc" and "busy" in entry["reason"]
    assert capfd.readouterr().err.count('"never_read" was declared') == 1
    assert (tmp_path / "busy.o").exists()


def test_the_machine_load_is_read_from_proc():
    load = split_nvcc.machine_load()
    assert load is not None and load[0] >= 1 and load[1] == len(os.sched_getaffinity(0))
