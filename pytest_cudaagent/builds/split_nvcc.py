"""nvcc with its host and device front ends run side by side: the same commands, half the wait.

nvcc compiles a `.cu` in one sequence: preprocess for the host, `cudafe++` (the host front end),
preprocess for the device, `cicc` (the device front end and optimiser), `ptxas`, `fatbinary`,
then the host compiler on what cudafe++ wrote. For a candidate that includes torch's headers each
front end parses about 280,000 preprocessed lines, and nvcc waits for one before starting the
other. The two chains share one file only: the module id, which cudafe++ writes and cicc reads,
and which cicc can compute itself from the same inputs.

This script is what torch's ninja file runs as `nvcc` (PYTORCH_NVCC, set by fast_build.install in
the candidate's worker). It asks the real nvcc for its plan (`-dryrun`, in a private temporary
directory), runs the host chain and the device chain at once, each computing its own module id,
then the rest of the plan, and replays every command's output in nvcc's order, stopping where
nvcc would have stopped, with that command's exit status. Anything it does not recognise in the
plan (relocatable device code, several host front ends, a tool it does not know), a module id
the two chains disagree on, or any failure of its own: it runs the real nvcc instead, so the
build is never worse than torch's own.

On a busy machine (at least as many runnable threads as cores when it starts) it runs the real
nvcc too: the two chains then only take turns on cores other builds want, and the split costs
more compiler time in all (a depfile asked for is a third preprocessing of the same headers).
Measured on the H100 machine, 72 candidates evaluated 14 at a time: the split builds took 110 s
(median) where KernelBench's whole evaluations, building with nvcc, took 94 s (README, "Side by
side"); with this rule, 106 s. CUDAAGENT_SPLIT_WHEN_BUSY=1 splits anyway.

With CUDAAGENT_HEADER_DIET=1 (EvalConfig.header_diet) it first compiles copies of the source on
fewer torch headers (header_diet.py: the lean copy on ATen's Tensor and the operators it names,
unless CUDAAGENT_HEADER_DIET_LEAN=0, then the copy on torch/types.h), each the whole of the above
in a process of its own, and only if they fail the source as written.

Stdlib only and run as a file (`python split_nvcc.py ARGS`), so no package (and no torch) is
imported before the compiler starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

try:
    from . import binding_split, header_diet
except ImportError:  # run as a file, as torch's ninja files run it: its folder is on sys.path
    import binding_split
    import header_diet

REAL_NVCC_ENV = "CUDAAGENT_REAL_NVCC"
# A file to append one JSON line per call to: which path it took and the seconds of each part
# (what the build benchmark and the tests read).
LOG_ENV = "CUDAAGENT_NVCC_LOG"
SPLIT_WHEN_BUSY_ENV = "CUDAAGENT_SPLIT_WHEN_BUSY"
# The .cu (its absolute path) whose PYBIND11_MODULE block fast_build moved into main.cpp for this
# build: only its kernels are compiled here (binding_split.py), never its binding a second time.
BINDING_IN_MAIN_ENV = "CUDAAGENT_BINDING_IN_MAIN"
# "0": nvcc's own sequence always (EvalConfig.split_nvcc off; the header diet may still be on).
SPLIT_ENV = "CUDAAGENT_SPLIT_NVCC"
# The tools nvcc's plan may name on the parallel path; anything else runs the real nvcc.
KNOWN_TOOLS = {"cudafe++", "cicc", "ptxas", "fatbinary", "rm", "gcc", "g++", "c++", "cc", "clang", "clang++"}
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
MODULE_ID_OPTION = re.compile(r'--module_id_file_name\s+("[^"]*"|\S+)')
GEN_C_FILE_OPTION = re.compile(r'--gen_c_file_name\s+("[^"]*"|\S+)')


@dataclass
class Step:
    """One command of nvcc's plan: its shell text and, once run, what it printed and returned."""

    index: int
    command: str
    returncode: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def tool(self) -> str:
        first = shlex.split(self.command)[0] if self.command.strip() else ""
        return os.path.basename(first.replace("$CICC_PATH/", ""))


@dataclass
class Plan:
    environment: dict[str, str]
    host_chain: list[Step]
    device_chain: list[Step]
    rest: list[Step]
    module_id_files: list[tuple[str, str]] = field(default_factory=list)  # (cudafe++'s, a cicc's own)

    @property
    def steps(self) -> list[Step]:
        return sorted(self.host_chain + self.device_chain + self.rest, key=lambda step: step.index)


def real_nvcc() -> str:
    configured = os.environ.get(REAL_NVCC_ENV)
    if configured:
        return configured
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and os.path.exists(os.path.join(cuda_home, "bin", "nvcc")):
        return os.path.join(cuda_home, "bin", "nvcc")
    found = shutil.which("nvcc")
    if not found:
        sys.exit("split_nvcc: no nvcc found (set CUDAAGENT_REAL_NVCC or CUDA_HOME)")
    return found


def unquote(value: str) -> str:
    """The value of a `#$ NAME=value` line of nvcc's dry run, as nvcc's own shell would see it
    for the variables the commands read (PATH, CICC_PATH, ...)."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"' and value.count('"') == 2:
        return value[1:-1]
    return value


def dry_run(nvcc: str, argv: list[str], scratch: str) -> tuple[dict[str, str], list[Step]] | None:
    """nvcc's own plan for these arguments: (environment, commands), or None when it has none."""
    environment = {**os.environ, "TMPDIR": scratch}
    completed = subprocess.run([nvcc, *argv, "-dryrun"], env=environment, capture_output=True, text=True)
    if completed.returncode != 0:
        return None
    steps: list[Step] = []
    for line in completed.stderr.splitlines():
        if not line.startswith("#$ "):
            continue
        text = line[3:]
        assignment = ASSIGNMENT.match(text)
        if assignment and not steps:
            environment[assignment.group(1)] = unquote(assignment.group(2))
        elif assignment:
            return None  # an assignment between commands: a plan this script does not know
        else:
            steps.append(Step(len(steps), text))
    return environment, steps


def plan_of(environment: dict[str, str], steps: list[Step]) -> Plan | str:
    """Split nvcc's plan into the host chain (preprocess, cudafe++), the device chain (everything
    else up to fatbinary and its clean-up) and the rest (the host compile); when the plan is not
    that shape, the reason why not."""
    tools = [step.tool for step in steps]
    unknown = sorted({tool for tool in tools if tool not in KNOWN_TOOLS})
    if unknown:
        return f"tools it does not know: {', '.join(unknown)}"
    if tools.count("cudafe++") != 1 or "cicc" not in tools or tools.count("fatbinary") != 1:
        return f"not one cudafe++, cicc and one fatbinary: {' '.join(tools)}"
    if any("--device-c" in step.command or "-rdc" in step.command for step in steps):
        return "relocatable device code"
    cudafe = steps[tools.index("cudafe++")]
    host_input = shlex.split(cudafe.command)[-1]
    producers = [step for step in steps[:cudafe.index] if f'"{host_input}"' in step.command or
                 f" {host_input}" in step.command]
    if len(producers) != 1 or " -E " not in producers[0].command:
        return "no single preprocessing step feeds cudafe++"
    host_chain = [producers[0], cudafe]
    fatbinary = steps[tools.index("fatbinary")]
    after = fatbinary.index + 1
    while after < len(steps) and steps[after].tool == "rm":
        after += 1
    device_chain = [step for step in steps[:after] if step not in host_chain]
    rest = steps[after:]
    if not rest or any(step.tool == "cudafe++" or step.tool == "cicc" for step in rest):
        return "nothing, or a front end, after fatbinary"

    module_id = MODULE_ID_OPTION.search(cudafe.command)
    if module_id is None or "--gen_module_id_file" not in cudafe.command:
        return "cudafe++ does not write the module id"
    shared = module_id.group(1)
    module_id_files = []
    for number, step in enumerate(step for step in device_chain if step.tool == "cicc"):
        match = MODULE_ID_OPTION.search(step.command)
        if match is None or match.group(1) != shared or "--gen_module_id_file" in step.command:
            return "a cicc that does not read cudafe++'s module id"
        own = shared[:-1] + f'.device{number}"' if shared.endswith('"') else f"{shared}.device{number}"
        step.command = MODULE_ID_OPTION.sub(f"--gen_module_id_file --module_id_file_name {own}", step.command, count=1)
        module_id_files.append((shared.strip('"'), own.strip('"')))
    # What cudafe++ writes besides the module id (its `--stub_file_name` only names the file cicc
    # writes): were the device chain to read it, the chains could not run side by side.
    host_output = GEN_C_FILE_OPTION.search(cudafe.command)
    if host_output is None or any(host_output.group(1).strip('"') in step.command for step in device_chain):
        return "the device chain reads what cudafe++ writes"
    return Plan(environment, host_chain, device_chain, rest, module_id_files)


def run_chain(chain: list[Step], environment: dict[str, str]) -> bool:
    """Each command in order through the shell (nvcc's commands use its variables), stopping at
    the first that fails."""
    for step in chain:
        command = step.command
        if step.tool == "rm":  # nvcc removes its temporary files quietly, present or not
            command = re.sub(r"^\s*rm\s", "rm -f ", command)
        completed = subprocess.run(["/bin/sh", "-c", command], env=environment, capture_output=True)
        step.returncode, step.stdout, step.stderr = completed.returncode, completed.stdout, completed.stderr
        if completed.returncode != 0:
            return False
    return True


def replay(steps: list[Step]) -> int:
    """What nvcc would have printed, in its order, and its exit status: up to the first command,
    in nvcc's own order, that failed or never ran."""
    for step in steps:
        if step.returncode is None:
            return 1
        sys.stdout.buffer.write(step.stdout)
        sys.stderr.buffer.write(step.stderr)
        if step.returncode != 0:
            sys.stdout.flush()
            sys.stderr.flush()
            return step.returncode
    sys.stdout.flush()
    sys.stderr.flush()
    return 0


def same_module_ids(plan: Plan) -> bool:
    try:
        return all(open(shared).read() == open(own).read() for shared, own in plan.module_id_files)
    except OSError:
        return False


def timed_chain(chain: list[Step], environment: dict[str, str], seconds: dict, part: str) -> bool:
    started = time.perf_counter()
    try:
        return run_chain(chain, environment)
    finally:
        seconds[part] = round(time.perf_counter() - started, 3)


WITH_COMPILE = ("--generate-dependencies-with-compile", "-MD")
DEPENDENCY_OUTPUT = ("--dependency-output", "-MF")
# Dependency options other than torch's pair above (long or short): their builds are nvcc's own.
OTHER_DEPENDENCY_OPTIONS = re.compile(r"^(-M[A-Z]*|--generate-(nonsystem-)?dependenc\S*|--dependency-\S*)$")


def without_dependencies(argv: list[str]) -> tuple[list[str], list[str] | None] | str:
    """(the compile's arguments, a separate `nvcc -M` run's or None). torch's ninja file asks nvcc
    for a depfile with the compile (`-MD -MF F`, long: --generate-dependencies-with-compile
    --dependency-output F), which adds a step to nvcc's plan that only nvcc itself can run;
    `nvcc -M -MF F -MT <object>` with the same options writes the same file, beside the split
    compile. Any other dependency option: the reason this script leaves the build to nvcc."""
    if not any(arg in WITH_COMPILE for arg in argv):
        if any(OTHER_DEPENDENCY_OPTIONS.match(arg) for arg in argv):
            return "dependency options other than torch's"
        return argv, None
    compile_argv, depfile, skip = [], None, False
    for index, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg in WITH_COMPILE:
            continue
        elif arg in DEPENDENCY_OUTPUT and index + 1 < len(argv):
            depfile, skip = argv[index + 1], True
        elif OTHER_DEPENDENCY_OPTIONS.match(arg):
            return "dependency options other than torch's"
        else:
            compile_argv.append(arg)
    if depfile is None or "-c" not in compile_argv or "-o" not in compile_argv[:-1]:
        return "a depfile without --dependency-output, -c and -o"
    output = compile_argv[compile_argv.index("-o") + 1]
    dependency_argv = [arg for arg in compile_argv if arg != "-c"]
    del dependency_argv[dependency_argv.index("-o"):dependency_argv.index("-o") + 2]
    return compile_argv, [*dependency_argv, "-M", "-MF", depfile, "-MT", output]


def machine_load() -> tuple[int, int] | None:
    """(threads runnable now, cores this process may use), from /proc/loadavg's fourth field
    (machine-wide even in a PID namespace); None where it cannot be read."""
    try:
        with open("/proc/loadavg") as file:
            runnable = int(file.read().split()[3].split("/")[0])
        return runnable, len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def busy_reason() -> str | None:
    """Why not to split now: the machine is busy (see the module's docstring); None to split."""
    if os.environ.get(SPLIT_WHEN_BUSY_ENV) == "1":
        return None
    load = machine_load()
    if load is None:
        return None
    runnable, cores = load
    # This process is one of the runnable ones.
    if runnable - 1 >= cores:
        return f"the machine is busy ({runnable} threads runnable on {cores} cores): nvcc's own sequence"
    return None


def run_split(nvcc: str, argv: list[str], log: dict) -> int | None:
    """The split build's exit status, or None (the reason in `log`) when the real nvcc must do it."""
    if os.environ.get(SPLIT_ENV) == "0":
        log["reason"] = "split off (EvalConfig.split_nvcc)"
        return None
    busy = busy_reason()
    if busy:
        log["reason"] = busy
        return None
    arguments = without_dependencies(argv)
    if isinstance(arguments, str):
        log["reason"] = arguments
        return None
    compile_argv, dependency_argv = arguments
    scratch = tempfile.mkdtemp(prefix="cudaagent-nvcc-")
    try:
        planned = dry_run(nvcc, compile_argv, scratch)
        plan = plan_of(*planned) if planned else "nvcc's dry run failed or set variables between commands"
        if isinstance(plan, str):
            log["reason"] = f"nvcc's plan: {plan}"
            return None
        seconds = log.setdefault("seconds", {})
        # A third chain when a depfile is asked for: nvcc itself, preprocessing only.
        dependencies = [Step(-1, shlex.join([nvcc, *dependency_argv]))] if dependency_argv is not None else []
        with ThreadPoolExecutor(3) as pool:
            host = pool.submit(timed_chain, plan.host_chain, plan.environment, seconds, "host")
            device = pool.submit(timed_chain, plan.device_chain, plan.environment, seconds, "device")
            if dependencies:
                pool.submit(timed_chain, dependencies, {**os.environ, "TMPDIR": scratch}, seconds, "dependencies")
            if host.result() and device.result():
                if not same_module_ids(plan):
                    log["reason"] = "the host and device front ends named the module differently"
                    return None  # nvcc's own sequence decides
                timed_chain(plan.rest, plan.environment, seconds, "rest")
        status = replay(plan.steps)
        # A failed compile has said why already (its preprocessing is the same); a failed
        # dependency run after a good compile is nvcc's failure too.
        if status == 0 and dependencies and dependencies[0].returncode != 0:
            return replay(dependencies)
        return status
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def write_log(log: dict) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        try:
            with open(path, "a") as file:
                file.write(json.dumps(log) + "\n")
        except OSError:  # a log this process may not write (a sandboxed build): the build still stands
            pass


def _lean() -> bool:
    """Whether the diet tries the lean copy first (header_diet.LEAN_ENV, on unless "0")."""
    return os.environ.get(header_diet.LEAN_ENV, "1") != "0"


def dieted_compile(argv: list[str], log: dict) -> int | None:
    """0 when a copy of the source on fewer torch headers compiled (header_diet.py: the lean copy,
    then the one on torch/types.h), or its kernels did beside its binding (binding_split.py): its
    output printed, its own log line merged into `log`. None, the reasons in `log`, to compile the
    source as written; nothing of a failed copy's compile is shown (the next copy's, or the
    source's own compile, speaks)."""
    attempts = header_diet.dieted_arguments(argv, lean=_lean())
    if isinstance(attempts, str):
        log["diet"] = attempts
        return split_binding_compile(argv, log)
    return _compiled_copy(argv, attempts, log)


def _one_source_to_one_object(argv: list[str]) -> tuple[str, str] | None:
    """(source, object) of a compile of one source (`-c SOURCE`) into one object (`-o OBJECT`);
    None for any other command line (nvcc's own, as written)."""
    if argv.count("-c") != 1 or "-o" not in argv[:-1] or argv.index("-c") + 1 >= len(argv):
        return None
    return argv[argv.index("-c") + 1], argv[argv.index("-o") + 1]


def kernels_only_compile(argv: list[str], log: dict) -> int:
    """The .cu whose binding main.cpp compiles (fast_build.binding_to_main): its kernels, the block
    blanked, through the diet's copies, else as written less the block (the source itself would
    define the module a second time). A failure is the build's: fast_build then builds as written.
    Called only for a compile of one source into one object (_binding_in_main)."""
    source, output = _one_source_to_one_object(argv)
    with open(source, encoding="utf-8") as file:
        parts = binding_split.split(file.read(), os.path.abspath(source))
    if isinstance(parts, str):  # fast_build split it the same way: only a changed file gets here
        print(f"split_nvcc: {source} changed since its binding was moved: {parts}", file=sys.stderr)
        return 1
    log["binding"] = "in main.cpp"
    attempts = header_diet.dieted_arguments(argv, lean=_lean(), text=parts.kernels)
    if not isinstance(attempts, str) and _compiled_copy(argv, attempts, log) == 0:
        log["output"] = output
        return 0
    copy = f"{os.path.abspath(output)}.kernels.cu"
    with open(copy, "w", encoding="utf-8") as file:
        file.write(header_diet.line_directive(1, os.path.abspath(source)) + "\n" + parts.kernels)
    written = list(argv)
    written[written.index("-c") + 1] = copy
    log["diet"] = "kernels as written"
    status = subprocess.run([sys.executable, os.path.abspath(__file__), *written],
                            env={**os.environ, header_diet.ENV: "0"}).returncode
    _name_the_source_in_the_depfile(argv, copy)
    return status


def _compile_copies(attempts: list) -> tuple[tuple | None, list]:
    """The first copy that compiles: (level, its nvcc's completed process, its path, its log
    lines), or None; and the failed attempts. Nothing printed; the copies that did not compile,
    and those not tried, removed."""
    failed = []
    for level, dieted_argv, copy in attempts:
        started = time.perf_counter()
        descriptor, inner_log = tempfile.mkstemp(prefix="cudaagent-nvcc-", suffix=".jsonl")
        os.close(descriptor)
        try:
            completed = subprocess.run([sys.executable, os.path.abspath(__file__), *dieted_argv], capture_output=True,
                                       env={**os.environ, header_diet.ENV: "0", LOG_ENV: inner_log})
            with open(inner_log) as file:
                lines = file.read().splitlines()
        finally:
            os.unlink(inner_log)
        if completed.returncode == 0:
            for _, _, unused in attempts:
                if unused != copy:
                    with contextlib.suppress(OSError):
                        os.unlink(unused)
            return (level, completed, copy, lines), failed
        with contextlib.suppress(OSError):
            os.unlink(copy)
        failed.append({"level": level, "exit": completed.returncode,
                       "wall_s": round(time.perf_counter() - started, 3)})
    return None, failed


def _show(*completed_processes) -> None:
    for completed in completed_processes:
        for stream, data in ((sys.stdout, completed.stdout), (sys.stderr, completed.stderr)):
            stream.flush()
            stream.buffer.write(data)
            stream.flush()


def _compiled_copy(argv: list[str], attempts: list, log: dict) -> int | None:
    compiled, failed = _compile_copies(attempts)
    if compiled is None:
        log["diet"] = "every copy failed: compiled as written"
        log["diet_failed"] = failed
        log["diet_wall_s"] = round(sum(attempt["wall_s"] for attempt in failed), 3)
        return None
    level, completed, copy, lines = compiled
    _show(completed)
    log.update(json.loads(lines[-1]) if lines else {})
    log["diet"], log["diet_level"] = "used", level
    _name_the_source_in_the_depfile(argv, copy)
    if failed:
        log["diet_failed"] = failed
    return 0


def split_binding_compile(argv: list[str], log: dict) -> int | None:
    """A source whose own PYBIND11_MODULE kept it off the diet: its kernels compiled through the
    diet's copies and its binding as C++ with torch's own C++ flags, at once, then linked into the
    one object asked for (binding_split.py). None, the reason in `log["binding"]`, to compile the
    source as written."""
    paths = _one_source_to_one_object(argv)
    if paths is None:
        return None  # (the diet said why)
    source, output = paths
    try:
        with open(source, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError):
        return None
    if not binding_split.BLOCK_START.search(text):
        return None
    started = time.perf_counter()
    parts = binding_split.split(text, os.path.abspath(source))
    linker = shutil.which("ld")
    command = binding_split.cxx_command(os.getcwd()) if linker else "no ld to link the two objects"
    if isinstance(parts, str) or isinstance(command, str):
        log["binding"] = parts if isinstance(parts, str) else command
        return None
    kernels_object, binding_object, binding_source = (f"{output}.kernels.o", f"{output}.binding.o",
                                                      f"{output}.binding.cpp")
    kernels_argv = list(argv)
    kernels_argv[kernels_argv.index("-o") + 1] = kernels_object
    attempts = header_diet.dieted_arguments(kernels_argv, lean=_lean(),
                                            text=parts.kernels)
    if isinstance(attempts, str):
        log["binding"] = f"its kernels: {attempts}"
        return None
    with open(binding_source, "w", encoding="utf-8") as file:
        file.write(parts.binding)
    made = [kernels_object, binding_object, binding_source]
    try:
        with ThreadPoolExecutor(1) as pool:
            binding = pool.submit(subprocess.run, [*command, "-c", binding_source, "-o", binding_object],
                                  capture_output=True)
            compiled, failed = _compile_copies(attempts)
            binding = binding.result()
        if compiled is None or binding.returncode != 0:
            log["binding"] = ("its kernels compiled on no copy" if compiled is None
                              else f"its binding did not compile (exit {binding.returncode})")
            if compiled is not None:
                made.append(compiled[2])
            return None
        missing = binding_split.unresolved(binding_split.nm_symbols(binding_object),
                                           binding_split.nm_symbols(kernels_object), parts.declared)
        if missing:
            log["binding"] = f"the kernels' object does not define {missing[0]}"
            made.append(compiled[2])
            return None
        linked = subprocess.run([linker, "-r", "-o", output, kernels_object, binding_object], capture_output=True)
        if linked.returncode != 0:
            log["binding"] = f"ld -r failed: {linked.stderr.decode(errors='replace')[:300]}"
            made.append(compiled[2])
            return None
        level, kernels, copy, lines = compiled
        _show(kernels, binding)
        log.update(json.loads(lines[-1]) if lines else {})
        log.update({"output": output, "diet": "used", "diet_level": level, "binding": "split", "declared": parts.declared,
                    "binding_wall_s": round(time.perf_counter() - started, 3)})
        if failed:
            log["diet_failed"] = failed
        _name_the_source_in_the_depfile(argv, copy, kernels_object)
        return 0
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.unlink(f"{binding_object}.d")


def _name_the_source_in_the_depfile(argv: list[str], copy: str, compiled_object: str | None = None) -> None:
    """The depfile asked for (-MF F) lists what the copy was compiled from: the source as
    written stands in the copy's place, so ninja's dependencies are the build's own files (a
    build folder moved without the copy, or the copy removed, would otherwise look out of date
    and rebuild)."""
    depfile = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in DEPENDENCY_OUTPUT), None)
    if depfile is None:
        return
    source = argv[argv.index("-c") + 1]
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(depfile, encoding="utf-8") as file:
            text = file.read()
        # Make writes paths with spaces escaped by a backslash.
        renamed = text.replace(copy.replace(" ", "\\ "), os.path.abspath(source).replace(" ", "\\ "))
        if compiled_object is not None:  # the kernels' object, linked into the one ninja asked for
            output = argv[argv.index("-o") + 1]
            renamed = renamed.replace(compiled_object.replace(" ", "\\ "), output.replace(" ", "\\ "))
        if renamed != text:
            with open(depfile, "w", encoding="utf-8") as file:
                file.write(renamed)


def _binding_in_main(argv: list[str]) -> bool:
    """Whether this compile is of the .cu whose binding main.cpp compiles (BINDING_IN_MAIN_ENV)."""
    moved, paths = os.environ.get(BINDING_IN_MAIN_ENV), _one_source_to_one_object(argv)
    return bool(moved) and paths is not None and os.path.abspath(paths[0]) == moved


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    log: dict = {"path": "split", "output": next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-o"), None)}
    if _binding_in_main(argv):
        try:
            status = kernels_only_compile(argv, log)
        except Exception as error:  # noqa: BLE001 - the build fails; fast_build builds as written
            print(f"split_nvcc: {type(error).__name__}: {error}", file=sys.stderr)
            status = 1
        log["returncode"], log["wall_s"] = status, round(time.perf_counter() - started, 3)
        write_log(log)
        return status
    if os.environ.get(header_diet.ENV) == "1":
        try:
            dieted = dieted_compile(argv, log)
        except Exception as error:  # never worse than torch's build: the source as written decides
            log["diet"] = f"{type(error).__name__}: {error}"
            dieted = None
        if dieted == 0:
            log["wall_s"] = round(time.perf_counter() - started, 3)
            write_log(log)
            return 0
    nvcc = real_nvcc()
    try:
        status = run_split(nvcc, argv, log)
    except Exception as error:  # never worse than torch's build: the real nvcc decides
        print(f"split_nvcc: {type(error).__name__}: {error}; running nvcc itself", file=sys.stderr)
        log["reason"] = f"{type(error).__name__}: {error}"
        status = None
    if status is None:
        log["path"] = "nvcc"
        status = subprocess.run([nvcc, *argv]).returncode
    log["returncode"], log["wall_s"] = status, round(time.perf_counter() - started, 3)
    write_log(log)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
