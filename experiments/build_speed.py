"""Cold build of each bundled candidate, torch's plain load_inline/load vs fast_build.py and split_nvcc.py (README, "Builds").

    python -m experiments.build_speed                      # CPU: C++ candidates evaluated, CUDA compile steps
    python -m experiments.build_speed --device cuda --fresh 10 --jobs 3   # GPU: CUDA candidates evaluated
    python -m experiments.build_speed --skip-evaluated --steps-candidates .styles/candidates --steps-count 6
                                                           # CPU: compile steps of published-style candidates
    python -m experiments.build_speed --device cuda --modes plain,diet,all --fresh 20 \\
        --pairs .styles/problems .styles/candidates --jobs 8      # candidates in published solutions' styles
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from benchmark.leaderboard import markdown_table
from experiments.throughput_templates import write_candidates
from pytest_cudaagent import EvalConfig, evaluate
from pytest_cudaagent.builds import header_diet, split_nvcc
from pytest_cudaagent.builds.fast_build import (
    EXTENSION_HEADERS,
    binding_to_main,
    ensure_pch,
    lean_declared_main,
    pch_dir,
    pch_variant,
    requested_variants,
    split_nvcc_command,
)
from pytest_cudaagent.core.files import (
    FIXED_BINDING_FILES,
    WORKSPACE_FILES_DIR,
    check_candidate,
    import_file,
)

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "examples" / "problems"
SCRIPTS = ROOT / "policy" / "scripts"
# What torch picks on an H100 when TORCH_CUDA_ARCH_LIST is unset (its visible GPU's arch).
H100_ARCH = "9.0+PTX"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(action):
    """(result, wall s, CPU s of the processes it ran): CPU time is what a busy shared box
    cannot inflate, wall time is what a user waits."""
    wall, cpu = time.perf_counter(), children_cpu_s()
    result = action()
    return result, time.perf_counter() - wall, children_cpu_s() - cpu


def workspace(name: str, device_dir: str, into: Path) -> Path:
    """A CUDA-Agent workspace as the scripted policy leaves it (policy/scripts/<device>/<name>.yaml)."""
    target = into / f"ws_{name}"
    (target / "kernels").mkdir(parents=True)
    for source in (SCRIPTS / device_dir / name).iterdir():
        shutil.copy(source, target / "kernels")
    shutil.copy(SCRIPTS / "shared" / name / f"{name}_binding.cpp", target / "kernels")
    shutil.copy(SCRIPTS / "shared" / name / "model_new.py", target / "model_new.py")
    shutil.copy(PROBLEMS / f"{name}.py", target / "model.py")
    for fixed in FIXED_BINDING_FILES:
        shutil.copy(WORKSPACE_FILES_DIR / fixed, target / fixed)
    return target


def cpu_pairs(into: Path) -> list[tuple[str, Path, Path]]:
    pairs = [(path.stem, PROBLEMS / path.name, path) for path in sorted((ROOT / "examples/candidates/cpu").glob("*.py"))]
    for yaml in sorted((SCRIPTS / "cpu").glob("*.yaml")):
        pairs.append((f"workspace {yaml.stem}", PROBLEMS / f"{yaml.stem}.py", workspace(yaml.stem, "cpu", into)))
    return pairs


def evaluated_table(pairs, scratch: Path) -> pd.DataFrame:
    """Each candidate evaluated twice on the CPU, each time with an empty build cache."""
    fast_cache = scratch / "fast"
    pch_s = {}
    for _, _, candidate in pairs:  # the shared PCH: built once per machine, before any candidate
        for variant in requested_variants(check_candidate(candidate), "cpu"):
            if variant not in pch_s:
                _, _, pch_s[variant] = measured(lambda variant=variant: ensure_pch(pch_dir(fast_cache), variant))
    print(f"shared PCH builds (once per machine), CPU s: {[round(s, 1) for s in pch_s.values()]}")
    rows = []
    for label, problem, candidate in pairs:
        row = {"candidate": label}
        for mode, fast in (("plain", False), ("fast", True)):
            cache = fast_cache if fast else scratch / f"plain-{len(rows)}"
            config = EvalConfig(device="cpu", timing=False, baselines=(), fast_build=fast, cache_dir=cache)
            result, _, cpu_s = measured(lambda config=config, problem=problem, candidate=candidate: evaluate(problem, candidate, config))
            row[f"{mode} build s"] = result.phase_seconds.get("build")
            row[f"{mode} CPU s"] = round(cpu_s, 1)
            row[f"{mode} verdict"] = result.status
        row["speedup (CPU s)"] = round(row["plain CPU s"] / row["fast CPU s"], 2)
        rows.append(row)
        print(markdown_table(pd.DataFrame([row])))
    return pd.DataFrame(rows)


CUDA_MODES = {  # what each mode of the GPU table turns on
    "plain": {"split_nvcc": False, "fast_build": False, "header_diet": False},  # torch's load_inline as it is
    "split": {"split_nvcc": True, "fast_build": False, "header_diet": False},  # nvcc's front ends side by side
    "split+pch": {"split_nvcc": True, "fast_build": True, "header_diet": False},  # and the shared PCH for the C++
    # the .cu on torch/types.h
    "diet": {"split_nvcc": False, "fast_build": False, "header_diet": True, "header_diet_lean": False},
    # the .cu on the lean headers first (ATen's Tensor, the dispatch macros, the operators it names)
    "lean": {"split_nvcc": False, "fast_build": False, "header_diet": True, "header_diet_lean": True},
    "all": {"split_nvcc": True, "fast_build": True, "header_diet": True, "header_diet_lean": True},  # `cudaagent bench`'s
}


def cuda_pairs(scratch: Path, fresh: int, styled: tuple[Path, Path] | None = None) -> list[tuple[str, Path, Path]]:
    """The bundled CUDA candidates and `fresh` more: generated ones (throughput_templates:
    distinct kernels, each its own source hash), or with `styled` (problems, candidates folders,
    as published_styles writes them) that many of its pairs, spread evenly over their names."""
    pairs = [(path.stem, PROBLEMS / path.name, path) for path in sorted((ROOT / "examples/candidates/cuda").glob("*.py"))]
    if fresh and styled:
        problems, candidates = styled
        names = sorted(path.name for path in candidates.glob("*.py") if (problems / path.name).exists())
        chosen = [names[index * len(names) // fresh] for index in range(min(fresh, len(names)))]
        pairs += [(Path(name).stem, problems / name, candidates / name) for name in chosen]
    elif fresh:
        for variant in write_candidates(scratch / "fresh", "cuda", fresh):
            pairs.append((variant.file_name.removesuffix(".py"), PROBLEMS / f"{variant.problem_stem}.py",
                          scratch / "fresh" / variant.file_name))
    return pairs


def cuda_table(pairs, scratch: Path, modes: list[str], jobs: int) -> pd.DataFrame:
    """Each candidate evaluated (correctness only) once per mode, each time with an empty build
    cache, `jobs` evaluations at a time with the modes interleaved (so load falls on all alike).
    A mode with the PCH gets it built before any candidate, once, as on a machine in use (a cache
    of its own per mode: a shared one would hand one mode's build to the next)."""
    variants = {v for _, _, candidate in pairs for v in requested_variants(check_candidate(candidate), "cuda")}
    for mode in modes:
        if CUDA_MODES[mode]["fast_build"]:
            for variant in variants:
                _, seconds, _ = measured(lambda variant=variant, mode=mode: ensure_pch(pch_dir(scratch / f"pch-cache-{mode}"), variant))
                print(f"shared PCH for {mode}, {variant.headers}, {variant.cflags[-3:]}: {seconds:.1f} s (once per machine)")

    def one(label, problem, candidate, mode):
        cache = scratch / f"pch-cache-{mode}" if CUDA_MODES[mode]["fast_build"] else scratch / f"cache-{mode}-{label}"
        config = EvalConfig(device="cuda", timing=False, baselines=(), cache_dir=cache, **CUDA_MODES[mode])
        started = time.perf_counter()
        result = evaluate(problem, candidate, config)
        if result.status not in ("passed", "incorrect"):
            print(f"{label} {mode}: {result.status}: {(result.error or '')[:1500]}", flush=True)
        return (label, mode, result.phase_seconds.get("build"), result.profile.get("cpu.candidate_build"),
                time.perf_counter() - started, result.status)

    work = [(label, problem, candidate, mode) for label, problem, candidate in pairs for mode in modes]
    rows: dict[str, dict] = {}
    with ThreadPoolExecutor(jobs) as pool:
        for label, mode, build_s, build_cpu_s, wall_s, status in pool.map(lambda item: one(*item), work):
            row = rows.setdefault(label, {"candidate": label})
            row[f"{mode} build s"] = round(build_s, 1) if build_s is not None else None
            row[f"{mode} build CPU s"] = round(build_cpu_s, 1) if build_cpu_s is not None else None
            row[f"{mode} verdict"] = status
            print(f"{label} {mode}: build {build_s} s ({build_cpu_s} CPU s), evaluation {wall_s:.1f} s, {status}",
                  flush=True)
    table = pd.DataFrame(rows.values())
    for mode in modes[1:]:
        table[f"plain / {mode}"] = (table["plain build s"] / table[f"{mode} build s"]).round(2)
    return table


# --build-logs: the nvcc wrapper's log, a relative path, so each build writes it in its own build
# directory (ninja runs there), which is the one a sandboxed build may write.
NVCC_LOG_NAME = "cudaagent-nvcc-log.jsonl"


def build_steps(scratch: Path, modes: list[str]) -> pd.DataFrame:
    """What each build of the modes with the shared cache spent, step by step: ninja's own log of
    each build directory (each target's wall time; a target built twice, as a lean binding that
    did not build and its retry, appears twice) and the nvcc wrapper's lines (split_nvcc's log,
    written into the build directory where `--build-logs` set a relative path): which copy of the
    header diet compiled, and the copies that failed first."""
    rows = []
    for mode in modes:
        if not CUDA_MODES[mode]["fast_build"]:
            continue
        for ninja_log in sorted((scratch / f"pch-cache-{mode}").rglob(".ninja_log")):
            build = ninja_log.parent
            for line in ninja_log.read_text().splitlines()[1:]:
                start_ms, end_ms, _, target, _ = line.split("\t")
                rows.append({"mode": mode, "build": build.name, "target": target,
                             "wall s": round((int(end_ms) - int(start_ms)) / 1000, 1)})
            nvcc_log = build / NVCC_LOG_NAME
            for line in nvcc_log.read_text().splitlines() if nvcc_log.exists() else []:
                entry = json.loads(line)
                failed = entry.get("diet_failed") or []
                rows.append({"mode": mode, "build": build.name, "target": f"nvcc {Path(entry.get('output', '?')).name}",
                             "wall s": entry.get("wall_s"),
                             "nvcc": f"path {entry.get('path')} diet {entry.get('diet')} level {entry.get('diet_level')} "
                                     f"binding {entry.get('binding')}; failed first: "
                                     + (", ".join(f"{attempt.get('level')} {attempt.get('wall_s')} s" for attempt in failed)
                                        or "none")})
    return pd.DataFrame(rows)


def cuda_summary(table: pd.DataFrame, modes: list[str]) -> str:
    lines = []
    for mode in modes[1:]:
        same = (table["plain verdict"] == table[f"{mode} verdict"]).sum()
        cpu = (table["plain build CPU s"] / table[f"{mode} build CPU s"]).median()
        lines.append(f"{mode}: median build {table[f'{mode} build s'].median():.1f} s "
                     f"({table[f'{mode} build CPU s'].median():.1f} CPU s) against plain "
                     f"{table['plain build s'].median():.1f} s ({table['plain build CPU s'].median():.1f} CPU s), "
                     f"median speedup {table[f'plain / {mode}'].median():.2f}x (CPU {cpu:.2f}x), "
                     f"same verdict {same}/{len(table)}")
    return "\n".join(lines)


class _Captured(Exception):
    pass


def captured_build(candidate: Path, extensions_dir: Path) -> dict:
    """The arguments the candidate's load_inline hands to torch's build, its sources written
    to disk as torch writes them; nothing compiled."""
    from torch.utils import cpp_extension

    original, seen = cpp_extension._jit_compile, {}
    signature = inspect.signature(original)

    def capture(*args, **kwargs):
        seen.update(signature.bind(*args, **kwargs).arguments)
        raise _Captured

    os.environ["TORCH_EXTENSIONS_DIR"] = str(extensions_dir)
    cpp_extension._jit_compile = capture
    try:
        import_file(candidate, f"captured_{candidate.stem}")
    except _Captured:
        pass
    finally:
        cpp_extension._jit_compile = original
    return seen


def timed_steps(build: dict, fast: bool, root: Path | None, directory: Path) -> dict[str, tuple[float, float]]:
    """Each compile step of one build, run through ninja on torch's own build file."""
    from torch.utils import cpp_extension

    extra_cflags = list(build["extra_cflags"] or [])
    # fast: the header diet and the binding split as the candidate's worker has them (on by
    # default), a binding written in the .cu compiled in load_inline's bare main.cpp, or
    # load_inline's own main.cpp, on its lean copy with the lean binding's shared PCH where it has
    # one (fast_build's jit_compile).
    # (load_inline wrote the sources where it builds: here the folder they were captured in)
    built_in = Path(build["sources"][0]).parent
    moved = (binding_to_main(build["sources"], built_in) or lean_declared_main(build["sources"], built_in)) if fast else None
    try:
        if fast and root is not None:
            lean = moved is not None and moved.lean_text is not None
            variant = pch_variant(extra_cflags, bool(build["with_cuda"]),
                                  header_diet.LEAN_BINDING_HEADERS if lean else EXTENSION_HEADERS)
            extra_cflags += ["-include", str(ensure_pch(root, variant))]
        # The machine's own list where it sets one (the H100 machine: 9.0a), else what torch picks on an H100.
        os.environ["TORCH_CUDA_ARCH_LIST"] = os.environ.get("TORCH_CUDA_ARCH_LIST") or H100_ARCH
        directory.mkdir(parents=True)
        # fast: the .cu through split_nvcc (what the candidate's worker sets up), plain: nvcc itself
        nvcc_before = os.environ.pop("PYTORCH_NVCC", None)
        if fast:
            os.environ["PYTORCH_NVCC"] = split_nvcc_command()
        cpp_extension._write_ninja_file_to_build_library(
            path=str(directory / "build.ninja"), name=build["name"], sources=build["sources"],
            extra_cflags=extra_cflags, extra_cuda_cflags=build["extra_cuda_cflags"] or [], extra_sycl_cflags=[],
            extra_ldflags=build["extra_ldflags"] or [], extra_include_paths=build["extra_include_paths"] or [],
            with_cuda=build["with_cuda"], with_sycl=False, is_standalone=False)
        os.environ.pop("PYTORCH_NVCC", None)
        if nvcc_before is not None:
            os.environ["PYTORCH_NVCC"] = nvcc_before
        steps = {}
        environment = {**os.environ, header_diet.ENV: "1" if fast else "0"}
        for source in build["sources"]:
            target = Path(source).name.replace(".cu", ".cuda.o") if source.endswith(".cu") else f"{Path(source).stem}.o"
            command = ["ninja", "-C", str(directory), target]
            _, wall_s, cpu_s = measured(lambda command=command: subprocess.run(command, check=True, capture_output=True,
                                                                                env=environment))
            steps[target] = (wall_s, cpu_s)
        return steps
    finally:
        if moved is not None:
            moved.undo()


def build_totals(steps: pd.DataFrame) -> pd.DataFrame:
    """Per candidate: plain's and fast's CPU seconds over all its compile steps and their ratio; a
    last row with the medians."""
    totals = steps.pivot_table(index="candidate", columns="mode", values="CPU s", aggfunc="sum").reset_index()
    totals["fast / plain"] = (totals["fast"] / totals["plain"]).round(2)
    median = {"candidate": "median", "plain": totals["plain"].median(), "fast": totals["fast"].median(),
              "fast / plain": totals["fast / plain"].median()}
    return pd.concat([totals, pd.DataFrame([median])], ignore_index=True)[["candidate", "plain", "fast", "fast / plain"]]


def stub_headers(scratch: Path) -> Path:
    """An include directory for compiling torch's CUDA headers with a CPU-only torch: it lacks one
    generated c10/cuda header (one line in the CUDA wheels); nvcc and that line are all a compile
    step needs."""
    from torch.utils import cpp_extension

    stub = scratch / "stub"
    header = stub / "c10/cuda/impl/cuda_cmake_macros.h"
    if not (Path(cpp_extension.include_paths()[0]) / "c10/cuda/impl/cuda_cmake_macros.h").exists() and not header.exists():
        header.parent.mkdir(parents=True)
        header.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    return stub


def steps_table(candidates: list[Path], scratch: Path, pch: bool = True) -> pd.DataFrame:
    """Compile steps only (no link, no import): how the CUDA candidates are timed without a GPU."""
    from torch.utils import cpp_extension

    cpp_extension.CUDA_HOME = cpp_extension.CUDA_HOME or str(Path(shutil.which("nvcc")).resolve().parents[1])
    stub = stub_headers(scratch)
    rows = []
    for candidate in candidates:
        build = captured_build(candidate, scratch / "captured")
        build["extra_include_paths"] = [*(build["extra_include_paths"] or []), str(stub)]
        if build["with_cuda"] is None:
            build["with_cuda"] = any(source.endswith(".cu") for source in build["sources"])
        for mode in ("plain", "fast"):
            steps = timed_steps(build, mode == "fast", pch_dir(scratch / "fast") if pch else None,
                                scratch / f"steps-{mode}-{candidate.stem}")
            for target, (wall_s, cpu_s) in steps.items():
                rows.append({"candidate": candidate.stem, "step": target, "mode": mode,
                             "wall s": round(wall_s, 1), "CPU s": round(cpu_s, 1)})
        print(markdown_table(pd.DataFrame(rows[-2 * len(build["sources"]):])))
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", help="candidate names to run (default: all)")
    parser.add_argument("--skip-evaluated", action="store_true", help="only the compile-step table")
    parser.add_argument("--steps-of", choices=("cuda", "cpu"), default="cuda",
                        help="which bundled candidates the compile-step table times")
    parser.add_argument("--no-pch", action="store_true", help="compile-step table: fast is split_nvcc only")
    parser.add_argument("--steps-candidates", type=Path, metavar="DIR",
                        help="compile-step table of these candidates (published_styles' candidates/) instead of the bundled")
    parser.add_argument("--steps-count", type=int, default=0, help="with --steps-candidates: this many, spread evenly")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: evaluate the CUDA candidates (needs a GPU) instead of the C++ ones")
    parser.add_argument("--fresh", type=int, default=0, help="with --device cuda: also this many generated candidates")
    parser.add_argument("--pairs", nargs=2, type=Path, metavar=("PROBLEMS", "CANDIDATES"),
                        help="with --device cuda --fresh N: N of these pairs (published_styles' folders) "
                             "instead of generated candidates")
    parser.add_argument("--jobs", type=int, default=1, help="with --device cuda: evaluations at a time")
    parser.add_argument("--modes", default="plain,split", help=f"with --device cuda: of {','.join(CUDA_MODES)}")
    parser.add_argument("--json", type=Path, help="with --device cuda: write the table here")
    parser.add_argument("--build-logs", action="store_true",
                        help="with --device cuda: print each shared-cache build's steps (ninja's log, the nvcc wrapper's)")
    args = parser.parse_args()
    if args.build_logs:
        os.environ[split_nvcc.LOG_ENV] = NVCC_LOG_NAME
    with tempfile.TemporaryDirectory(prefix="build-speed-") as scratch_name:
        scratch = Path(scratch_name)
        if args.device == "cuda":
            modes = args.modes.split(",")
            if modes[0] != "plain" or any(mode not in CUDA_MODES for mode in modes):
                parser.error(f"--modes starts with plain and names modes of {', '.join(CUDA_MODES)}")
            pairs = [pair for pair in cuda_pairs(scratch, args.fresh, args.pairs) if not args.only or pair[0] in args.only]
            table = cuda_table(pairs, scratch, modes, args.jobs)
            print("\nCold builds of CUDA candidates, evaluated (correctness only), an empty build cache each:")
            print(markdown_table(table))
            print(cuda_summary(table, modes))
            if args.build_logs:
                print("\nEach build's steps (ninja's log; the nvcc wrapper's lines):")
                print(markdown_table(build_steps(scratch, modes)))
            if args.json:
                args.json.write_text(table.to_json(orient="records", indent=1))
            return
        if not args.skip_evaluated:
            pairs = [pair for pair in cpu_pairs(scratch) if not args.only or pair[0].split()[-1] in args.only]
            print("\nCold builds, evaluated on the CPU (empty build cache each):")
            print(markdown_table(evaluated_table(pairs, scratch)))
        step_candidates = sorted((args.steps_candidates or ROOT / "examples" / "candidates" / args.steps_of).glob("*.py"))
        if args.steps_count:
            step_candidates = [step_candidates[int(i * len(step_candidates) / args.steps_count)]
                               for i in range(min(args.steps_count, len(step_candidates)))]
        step_candidates = [path for path in step_candidates if not args.only or path.stem in args.only]
        print("\nCompile steps (torch's ninja file, the machine's arch list or 9.0+PTX as on an H100; "
              f"fast: the .cu through split_nvcc{'' if args.no_pch else ', the C++ with the shared PCH'}):")
        steps = steps_table(step_candidates, scratch, pch=not args.no_pch)
        print(markdown_table(steps))
        print("\nEach candidate's compile steps together (CPU s), and fast's share of plain's:")
        print(markdown_table(build_totals(steps)))


if __name__ == "__main__":
    main()
