"""The candidates' build path: torch's `load`/`load_inline` unchanged, plus a shared precompiled
header for `torch/extension.h` and build locks that die with their owner.

Two sides. The parent (trusted) reads the candidate's source, works out the compile flags its
`load_inline`/`load` calls will use, and builds the precompiled header (PCH) for those flags into
the shared cache; only this code ever writes there. The candidate's worker wraps torch's
`_jit_compile` before the candidate is imported: each build takes an fcntl lock on its build
directory (a killed builder's lock goes with it), clears torch's stale lock file, and, when the
shared cache holds a PCH for exactly the flags the candidate asked for, adds `-include` of it.
Whatever flags a candidate passes, it gets that build or torch's own; the PCH only replaces the
parsing of `torch/extension.h` (gcc ignores a PCH whose flags differ and parses the header text).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.config import BUILD_NICENESS, PCH_BUILD_TIMEOUT_S
from ..timing.locks import file_lock
from . import binding_split, header_diet, split_nvcc

PCH_HEADER = "cudaagent_pch.h"
PCH_DONE = "done.json"
BUILD_LOG = "build.log"  # one line per PCH the evaluator built: key, flags, seconds
TORCH_LOCK = "lock"  # torch's FileBaton file: left behind by a builder that was killed
BUILD_LOCK = ".cudaagent-build.lock"
logger = logging.getLogger(__name__)
# Flags a candidate may ask for that the parent also runs its compiler with to build a PCH. Any
# other flag (-B, -fplugin=, -specs=, -include, ...) could run or read what the candidate chose,
# so its builds take torch's path with no shared PCH.
SAFE_FLAG = re.compile(
    r"-O[0-3sgz]?|-Ofast|-g[0-3]?|-w|-W(?!l,|a,|p,)[A-Za-z0-9+=-]+|-std=(c|gnu)\+\+[0-9a-z]+|-pthread"
    r"|-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.]*)?|-U[A-Za-z_][A-Za-z0-9_]*"
    r"|-f(?!plugin|dump|profile|record|debug|save|auto-profile|lto|sanitize)[a-z0-9+-]+"
    r"|-m(arch|tune|cpu)=[a-z0-9-]+|-m[a-z0-9-]+"
)


# The header sets a PCH is built of (pch_headers says which a build takes).
EXTENSION_HEADERS = ("torch/extension.h",)
TYPES_PYBIND_HEADERS = ("torch/types.h", "torch/csrc/utils/pybind.h")


@dataclass(frozen=True)
class PchVariant:
    """One precompiled header set (`torch/extension.h` unless `headers` says otherwise): the flags
    torch compiles a C++ source with (less the extension's own name, which the headers never read)
    for one compiler and one torch."""

    compiler: str
    cflags: tuple[str, ...]
    headers: tuple[str, ...] = EXTENSION_HEADERS  # what the PCH includes, in order

    def key(self) -> str:
        import torch

        identity = [self.compiler, _compiler_stamp(self.compiler), torch.__version__, torch.__file__, *self.cflags]
        if self.headers != EXTENSION_HEADERS:  # the keys of PCHs built before header sets stay valid
            identity += ["headers", *self.headers]
        return hashlib.sha256("\0".join(identity).encode()).hexdigest()[:20]


def pch_variant(extra_cflags, with_cuda: bool, headers: tuple[str, ...] = EXTENSION_HEADERS) -> PchVariant | None:
    """The variant torch's build of a C++ source with these extra flags would need, or None when
    a flag is not one the evaluator compiles a shared header with."""
    from torch.utils import cpp_extension

    flags = [flag.strip() for flag in extra_cflags or [] if flag.strip()]
    if not all(SAFE_FLAG.fullmatch(flag) for flag in flags):
        return None
    # gcc itself refuses a PCH when a macro the header reads is defined differently (and then
    # parses the header text), so the candidate's own -D/-U need no PCH of their own.
    flags = [flag for flag in flags if not flag.startswith(("-D", "-U"))]
    compiler = shutil.which(cpp_extension.get_cxx_compiler())
    if compiler is None or not cpp_extension.check_compiler_is_gcc(compiler):
        return None  # .gch files are gcc's
    try:
        system_includes = cpp_extension.include_paths("cuda" if with_cuda else "cpu")
    except OSError:  # no CUDA toolkit: torch's own build of this source fails the same way
        return None
    system_includes.append(sysconfig.get_path("include", scheme="posix_prefix"))
    # As torch's _write_ninja_file_to_build_library puts them together for a C++ source.
    cflags = ["-DTORCH_API_INCLUDE_EXTENSION_H"]
    for include in system_includes:
        cflags += ["-isystem", include]
    standard = torch_cxx_standard()
    if standard is None:
        return None
    return PchVariant(compiler, (*cflags, "-fPIC", standard, *flags), headers)


@functools.lru_cache(maxsize=1)
def torch_cxx_standard() -> str | None:
    """The `-std=` torch's JIT build compiles a C++ source with, as this torch writes it in its
    ninja file: it changed from c++17 (torch 2.11, the H100 machine's) to c++20 (2.13), and a PCH
    built under another standard is silently ignored by gcc, which then parses the header text.
    None where the ninja file cannot be written or read (another torch's private writer): no PCH."""
    try:
        return next(flag for flag in torch_cxx_cflags() if flag.startswith("-std="))
    except Exception as error:  # noqa: BLE001  a torch whose writer changed builds the plain way
        logger.warning("torch's compile flags not read (%s); candidates build without a shared PCH", error)
        return None


@functools.lru_cache(maxsize=1)
def torch_cxx_cflags() -> tuple[str, ...]:
    """The `cflags` of the ninja file torch writes for one C++ source of an extension (no CUDA,
    so no device is queried), less the extension's name."""
    from torch.utils import cpp_extension

    writer = cpp_extension._write_ninja_file_to_build_library
    accepted = inspect.signature(writer).parameters
    arguments = {"name": "cudaagent_probe", "sources": ["probe.cpp"], "extra_cflags": [], "extra_cuda_cflags": [],
                 "extra_sycl_cflags": [], "extra_ldflags": [], "extra_include_paths": [], "with_cuda": False,
                 "with_sycl": False, "is_standalone": False}
    with tempfile.TemporaryDirectory(prefix="cudaagent-probe-") as directory:
        ninja_file = Path(directory) / "build.ninja"
        writer(path=str(ninja_file), **{name: value for name, value in arguments.items() if name in accepted})
        line = next(line for line in ninja_file.read_text().splitlines() if line.startswith("cflags = "))
    return tuple(flag for flag in shlex.split(line.removeprefix("cflags = "))
                 if not flag.startswith("-DTORCH_EXTENSION_NAME="))


def _compiler_stamp(compiler: str) -> str:
    stat = Path(compiler).resolve().stat()
    return f"{stat.st_size}-{stat.st_mtime_ns}"


# ----------------------------------------------------------------------------------------------
# The shared cache (written by the parent only)


def pch_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / "pch"


def ready_pch(root: Path, variant: PchVariant) -> Path | None:
    """The header to `-include` for this variant, if a finished PCH for it is in the cache. A
    PCH cut short (killed build, full disk) has a size other than the one its builder recorded."""
    entry = Path(root) / variant.key()
    try:
        done = json.loads((entry / PCH_DONE).read_text())
        finished = (entry / f"{PCH_HEADER}.gch").stat().st_size == done["gch_bytes"]
    except (OSError, ValueError, KeyError):
        return None
    return entry / PCH_HEADER if finished else None


def ensure_pch(root: Path, variant: PchVariant, wait: bool = True) -> Path | None:
    """Build the PCH for `variant` unless the cache already has it; one builder at a time per
    variant, the others wait on its lock (`wait` False: return None at once instead). Built under
    a temporary name and renamed, so a build that dies leaves nothing that passes for a finished
    one."""
    root = Path(root)
    key = variant.key()
    with file_lock(root / f"{key}.lock", wait=wait) as held:
        if not held:
            return None
        ready = ready_pch(root, variant)
        if ready is not None:
            return ready
        entry, staging = root / key, root / f"{key}.building"
        shutil.rmtree(entry, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        header = staging / PCH_HEADER
        header.write_text("".join(f"#include <{name}>\n" for name in variant.headers))
        gch = staging / f"{PCH_HEADER}.gch"
        started = time.perf_counter()
        command = [variant.compiler, *variant.cflags, "-x", "c++-header", str(header), "-o", str(gch)]
        returncode, stderr = _run_compiler(command)
        if returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(f"building the shared precompiled header failed: {' '.join(command)}\n"
                               f"{stderr[-2000:]}")
        seconds = time.perf_counter() - started
        (staging / PCH_DONE).write_text(json.dumps({"gch_bytes": gch.stat().st_size, "cflags": variant.cflags}))
        staging.rename(entry)
        with open(root / BUILD_LOG, "a") as log:
            log.write(f"{key} {seconds:.1f}s {' '.join(variant.cflags)}\n")
        return entry / PCH_HEADER


def _run_compiler(command: list[str]) -> tuple[int, str]:
    """Run the compiler in its own process group: on a timeout the group is killed, since
    killing the gcc driver alone leaves its cc1plus running."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=_clean_env(), start_new_session=True)
    try:
        _, stderr = process.communicate(timeout=PCH_BUILD_TIMEOUT_S)
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return process.returncode, stderr


def _clean_env() -> dict[str, str]:
    """The compiler's environment without the variables that add include paths or plugins."""
    dropped = ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
               "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES")
    return {name: value for name, value in os.environ.items() if name not in dropped}


# Where the PCH pays: a C++ source that includes all of torch/extension.h (load_inline's own
# main.cpp unless no_implicit_headers=True). Forced into a source that includes only
# torch/types.h and pybind, it made the compile slower (H100: 16.4 -> 22.8 s; README, "Builds"):
# such a source gets a PCH of exactly those two (TYPES_PYBIND_HEADERS), and only when they open
# it, so that including them first through -include changes nothing.
EXTENSION_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]torch/extension\.h[>"]', re.MULTILINE)
# A source opening with these (after comments, blank lines and standard library includes, which
# torch's headers include themselves) means the same with them included first.
_INCLUDE_LINE = re.compile(r'#\s*include\s*[<"]([^>"]+)[>"]\s*(//.*)?')
_STANDARD_HEADER = re.compile(r"[a-z_]+")


def opening_includes(text: str) -> list[str]:
    """The headers a source includes before anything else (comments and blank lines aside)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    included = []
    for line in text.splitlines():
        line = line.strip()
        match = _INCLUDE_LINE.fullmatch(line)  # its own trailing comment allowed
        if match is None and line.split("//", 1)[0].strip():
            break  # code, not a comment
        if match is not None:
            included.append(match.group(1))
    return included


def opens_with_types_and_pybind(text: str) -> bool:
    names = [name for name in opening_includes(text) if not _STANDARD_HEADER.fullmatch(name)]
    return tuple(names[:len(TYPES_PYBIND_HEADERS)]) == TYPES_PYBIND_HEADERS


def headers_of_texts(texts: list[str]) -> tuple[str, ...] | None:
    """The header set C++ sources with these texts take a PCH of: torch/extension.h when one
    includes it; torch/types.h and pybind when every one opens with them; else None."""
    if any(EXTENSION_INCLUDE.search(text) for text in texts):
        return EXTENSION_HEADERS
    if texts and all(opens_with_types_and_pybind(text) for text in texts):
        return TYPES_PYBIND_HEADERS
    return None


def pch_headers(sources) -> tuple[str, ...] | None:
    """headers_of_texts of the C++ (not CUDA) files among these, as torch wrote them."""
    texts = []
    for source in sources:
        if Path(source).suffix in (".cu", ".cuh"):
            continue
        try:
            texts.append(Path(source).read_text(errors="replace"))
        except OSError:
            continue
    return headers_of_texts(texts)


def requested_variants(candidate, device: str) -> list[PchVariant]:
    """The variants a candidate's builds will ask for, read from its source without running it:
    each `load_inline`/`load` call whose `extra_cflags` is written out as a list of strings and
    whose C++ may include torch/extension.h. A workspace builds with the evaluator's own flags
    (files.build_workspace_extension), its binding through binding_registry.h, which includes it."""
    from ..core.files import WORKSPACE_CFLAGS

    if candidate.workspace:
        calls = [(WORKSPACE_CFLAGS, device == "cuda", EXTENSION_HEADERS)]
    else:
        calls = _literal_build_calls(candidate.model_file, device)
    variants = [pch_variant(flags, with_cuda, headers) for flags, with_cuda, headers in calls if headers]
    return list(dict.fromkeys(v for v in variants if v is not None))


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level NAME = "..." assignments (a candidate's C++ source is usually one)."""
    constants = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            constants[node.targets[0].id] = node.value.value
    return constants


def _pch_headers_of_call(node: ast.Call, keywords: dict, constants: dict[str, str]) -> tuple[str, ...] | None:
    """The header set the call's C++ will take a PCH of (pch_headers): torch/extension.h unless
    its C++ sources are known not to include it (no_implicit_headers=True and every cpp source a
    literal or module constant without it); then torch/types.h and pybind if every one opens with
    them; else None."""
    try:
        no_implicit = ast.literal_eval(keywords["no_implicit_headers"]) if "no_implicit_headers" in keywords else False
    except ValueError:
        return EXTENSION_HEADERS
    if no_implicit is not True:
        return EXTENSION_HEADERS
    texts, computed = _source_texts(node, keywords, constants, "cpp_sources", 1)
    if computed:
        return EXTENSION_HEADERS  # the worker reads the written file and decides
    return headers_of_texts(texts)


def _source_texts(node: ast.Call, keywords: dict, constants: dict[str, str], keyword: str,
                  position: int) -> tuple[list[str], bool]:
    """The texts of a build call's source argument (by keyword, else at `position`) that are
    written out as string literals or module constants, one or a list of them; and whether any
    item is computed (its text unknown before the candidate runs)."""
    sources = _argument(node, keywords, keyword, position)
    items = sources.elts if isinstance(sources, (ast.List, ast.Tuple)) else [sources]
    texts, computed = [], False
    for item in items:
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            texts.append(item.value)
        elif isinstance(item, ast.Name) and item.id in constants:
            texts.append(constants[item.id])
        else:
            computed = True
    return texts, computed


def _literal_build_calls(path: Path, device: str) -> list[tuple[list[str], bool, tuple[str, ...] | None]]:
    """(extra_cflags, with_cuda, the header set its C++ takes a PCH of) per call."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return []
    constants = _string_constants(tree)
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name not in ("load_inline", "load"):
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
        try:
            flags = ast.literal_eval(keywords["extra_cflags"]) if "extra_cflags" in keywords else []
            with_cuda = ast.literal_eval(keywords["with_cuda"]) if "with_cuda" in keywords else None
        except ValueError:
            continue
        if with_cuda is None:
            if name == "load_inline":
                with_cuda = _has_cuda_sources(node, keywords)
            else:
                with_cuda = device == "cuda"
        if isinstance(flags, (list, tuple)) and all(isinstance(flag, str) for flag in flags):
            headers = EXTENSION_HEADERS if name == "load" else _pch_headers_of_call(node, keywords, constants)
            calls.append((list(flags), bool(with_cuda), headers))
            if name == "load_inline" and with_cuda and (_cuda_source_binds(node, keywords, constants)
                                                         or _declares_functions(node, keywords)):
                # Its binding moves into main.cpp (binding_to_main), or main.cpp holds it
                # (lean_declared_main): on the lean headers first.
                calls.append((list(flags), True, header_diet.LEAN_BINDING_HEADERS))
    return calls


def _cuda_source_binds(node: ast.Call, keywords: dict, constants: dict[str, str]) -> bool:
    """Whether the call's CUDA source, written out or a module constant, holds a PYBIND11_MODULE."""
    texts, _ = _source_texts(node, keywords, constants, "cuda_sources", 2)
    return any(binding_split.BLOCK_START.search(text) for text in texts)


def _declares_functions(node: ast.Call, keywords: dict) -> bool:
    """Whether load_inline is asked to bind functions (`functions`, fourth, not None)."""
    return _passed(_argument(node, keywords, "functions", 3))


def _has_cuda_sources(node: ast.Call, keywords: dict) -> bool:
    return _passed(_argument(node, keywords, "cuda_sources", 2))


def _argument(node: ast.Call, keywords: dict, keyword: str, position: int) -> ast.expr | None:
    """A build call's argument by keyword, else at `position`; None where it is not passed."""
    return keywords.get(keyword, node.args[position] if len(node.args) > position else None)


def _passed(argument: ast.expr | None) -> bool:
    """Whether an argument is given other than as a literal None."""
    return argument is not None and not (isinstance(argument, ast.Constant) and argument.value is None)


def prepare_pch(candidate, cache_dir: Path, device: str) -> None:
    """Build the PCHs the candidate will ask for that no other process is building now. A
    failure is logged, never raised: the candidate then builds the plain way."""
    for variant in requested_variants(candidate, device):
        try:
            ensure_pch(pch_dir(cache_dir), variant, wait=False)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
            logger.warning("precompiled header not built; candidates build without it: %s", error)


_pch_builders: dict[Path, threading.Thread] = {}  # this process's, by PCH cache
_pch_builders_lock = threading.Lock()


def start_pch(candidate, cache_dir: Path, device: str) -> threading.Thread | None:
    """prepare_pch in a thread of this process, unless one of this process is still at it for
    this cache. Nobody waits for it: the candidates of a fresh cache build the plain way until it
    is made (a PCH takes about as long as a plain build), later ones take it, and an evaluation
    ends when its own work does (#21: the eight evaluations of a batch's first wave each waited
    for the one PCH). Not a daemon: the process waits for it before it exits, so its compiler
    (PCH_BUILD_TIMEOUT_S at most) is never left behind."""
    root = pch_dir(cache_dir)
    with _pch_builders_lock:
        running = _pch_builders.get(root)
        if running is not None and running.is_alive():
            return None
        builder = threading.Thread(target=prepare_pch, args=(candidate, cache_dir, device), name="cudaagent-pch")
        _pch_builders[root] = builder
        builder.start()
        return builder


# ----------------------------------------------------------------------------------------------
# The candidate's worker


@contextmanager
def build_lock(build_directory: str | Path):
    """Held for a whole build of one directory. An fcntl lock is dropped by the kernel when its
    holder dies, so holding it proves that a torch lock file found now is a dead builder's."""
    build_directory = Path(build_directory)
    build_directory.mkdir(parents=True, exist_ok=True)
    with file_lock(build_directory / BUILD_LOCK):
        (build_directory / TORCH_LOCK).unlink(missing_ok=True)
        yield


def install_nvcc_wrapper(split: bool, diet: bool, lean: bool = True) -> bool:
    """Make split_nvcc.py the `nvcc` of every ninja file torch writes in this process (torch
    reads PYTORCH_NVCC when it writes one): with `split` nvcc's front ends run side by side, with
    `diet` a source's torch include is first tried as the lean headers (`lean`), then as
    torch/types.h (header_diet.py). A
    user's own PYTORCH_NVCC (ccache, say) is kept, and with it neither."""
    from torch.utils import cpp_extension

    if "PYTORCH_NVCC" in os.environ or not cpp_extension.CUDA_HOME or not (split or diet):
        return False
    os.environ[split_nvcc.REAL_NVCC_ENV] = os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc")
    os.environ[split_nvcc.SPLIT_ENV] = "1" if split else "0"
    os.environ[header_diet.ENV] = "1" if diet else "0"
    os.environ[header_diet.LEAN_ENV] = "1" if lean else "0"
    os.environ["PYTORCH_NVCC"] = split_nvcc_command()
    return True


def split_nvcc_command() -> str:
    """The shell command that runs split_nvcc.py as a file with this Python (stdlib only: no
    package, no torch imported before the compiler starts)."""
    return shlex.join([sys.executable, str(Path(split_nvcc.__file__).resolve())])


def install(pch_root: Path | None, split: bool = True, diet: bool = False, lean: bool = True) -> None:
    """Route every torch extension build in this process through the build lock and, unless
    `pch_root` is None (EvalConfig.fast_build off), the shared PCH; with `split`
    (EvalConfig.split_nvcc) or `diet` (EvalConfig.header_diet) nvcc runs as split_nvcc.py. load
    and load_inline both build through cpp_extension._jit_compile. No arch flags: with TORCH_CUDA_ARCH_LIST unset torch already
    builds for the visible GPU only, and dropping its PTX copy saved nothing measurable (README,
    "Builds")."""
    from torch.utils import cpp_extension

    wrapped_nvcc = install_nvcc_wrapper(split, diet, lean)

    original = cpp_extension._jit_compile
    signature = inspect.signature(original)

    def jit_compile(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        arguments = bound.arguments
        sources = arguments["sources"]
        with_cuda = arguments.get("with_cuda")
        if with_cuda is None:
            with_cuda = any(Path(source).suffix in (".cu", ".cuh") for source in sources)
        written_cflags = arguments.get("extra_cflags")
        headers = pch_headers(sources) if pch_root is not None else None  # reads the sources: only with a cache
        with_pch = with_ready_pch(pch_root, written_cflags, with_cuda, headers)

        def build(cflags=with_pch):
            arguments["extra_cflags"] = cflags
            return niced(lambda: original(*bound.args, **bound.kwargs), BUILD_NICENESS)

        with build_lock(arguments["build_directory"]):
            moved = binding_to_main(sources, arguments["build_directory"]) if wrapped_nvcc and diet else None
            declared = (lean_declared_main(sources, arguments["build_directory"])
                        if moved is None and wrapped_nvcc and diet else None)
            if declared is not None:
                return declared.build_lean_first(build, with_ready_pch(pch_root, written_cflags, with_cuda,
                                                                       header_diet.LEAN_BINDING_HEADERS))
            if moved is None:
                return build()
            try:
                if moved.lean_text is not None:
                    try:
                        # Not with the shared PCH of torch/extension.h: the lean main.cpp includes
                        # less than it holds, and loading it cost more than parsing what main.cpp
                        # does include; with the lean binding's own where one is ready.
                        return build(with_ready_pch(pch_root, written_cflags, with_cuda,
                                                    header_diet.LEAN_BINDING_HEADERS))
                    except Exception as error:  # noqa: BLE001 - the binding on torch/extension.h decides
                        logger.info("the moved binding's lean copy did not build (%s): on torch/extension.h", error)
                        moved.on_extension_h()
                return build()
            except Exception as error:  # noqa: BLE001 - the build as written decides
                logger.info("the binding moved into main.cpp did not build (%s): building as written", error)
                moved.refuse()
            finally:
                moved.undo()
            return build()

    cpp_extension._jit_compile = jit_compile


def with_ready_pch(pch_root: Path | None, cflags, with_cuda: bool, headers: tuple[str, ...] | None):
    """`cflags` with the shared PCH of `headers` `-include`d where one is ready for these flags,
    else as they are (no cache, no header set, flags it is not built for). The source's own
    header set (pch_headers), or the lean binding's (header_diet.LEAN_BINDING_HEADERS): a lean
    binding opens with those headers, so what it includes after them is what it included before;
    on the 2-core box its compile went from 5.4-5.8 CPU s to 3.6 with one (docs/builds.md). A PCH
    whose macros do not match is refused by gcc, which then reads the headers themselves."""
    if pch_root is None or not headers:
        return cflags
    variant = pch_variant(cflags, with_cuda, headers)
    header = ready_pch(pch_root, variant) if variant is not None else None
    return [*(cflags or []), "-include", str(header)] if header is not None else cflags


# load_inline's main.cpp when the binding is the .cu's own: the include and an empty C++ source.
BARE_MAIN = "#include <torch/extension.h>"
BINDING_REFUSED = ".cudaagent-binding-as-written"  # in the build directory: once failed, not tried again


@dataclass
class MovedBinding:
    """A `.cu`'s PYBIND11_MODULE block moved into `main.cpp` for one build (binding_to_main):
    first its lean copy (`lean_text`, header_diet.lean_binding) where it has one, then
    `extension_text`, on torch/extension.h. Or load_inline's own `main.cpp` on its lean copy
    (lean_declared_main), `extension_text` being `main.cpp` as written."""

    main: Path
    main_text: str
    build_directory: Path
    extension_text: str = ""
    lean_text: str | None = None

    def on_extension_h(self) -> None:
        self.main.write_text(self.extension_text)

    def undo(self) -> None:
        """main.cpp as load_inline wrote it, and nvcc told nothing (torch hashed what it built)."""
        self.main.write_text(self.main_text)
        os.environ.pop(split_nvcc.BINDING_IN_MAIN_ENV, None)

    def refuse(self) -> None:
        with contextlib.suppress(OSError):
            (self.build_directory / BINDING_REFUSED).touch()

    def build_lean_first(self, build, lean_cflags):
        """main.cpp as written is torch/extension.h's (lean_declared_main): the lean copy with
        `lean_cflags`, and where main.cpp is what failed, main.cpp as written (not tried lean
        again in this build directory). A failure of the `.cu` alone is the build's own: it
        compiles the same with either main.cpp."""
        try:
            return build(lean_cflags)
        except Exception as error:  # noqa: BLE001 - re-raised unless main.cpp may be the cause
            if _only_cuda_failed(str(error)):
                raise
            logger.info("the lean copy of main.cpp did not build (%s): building as written", error)
            self.refuse()
        finally:
            self.undo()
        return build()


# ninja's line for a failed step ("FAILED: main.o", "FAILED: [code=1] cuda.cuda.o" from 1.12 on).
_FAILED_STEP = re.compile(r"^FAILED: (?:\[code=\d+\] )?(\S+)", re.M)


def _only_cuda_failed(message: str) -> bool:
    """Whether torch's build error names failed steps and every one is a CUDA object's."""
    failed = _FAILED_STEP.findall(message)
    return bool(failed) and all(step.endswith(".cuda.o") for step in failed)


def _load_inline_main(sources, build_directory) -> tuple[Path, str, list[Path]] | None:
    """(main.cpp, its text, the `.cu` sources) of a build whose one main.cpp load_inline wrote in
    the build directory (a main.cpp of the candidate's own, load(), is never touched) and whose
    main.cpp has not failed a copy there before (BINDING_REFUSED); else None."""
    paths = [Path(source) for source in sources]
    mains = [path for path in paths if path.name == "main.cpp"]
    if len(mains) != 1 or mains[0].resolve().parent != Path(build_directory).resolve() \
            or (Path(build_directory) / BINDING_REFUSED).exists():
        return None
    try:
        return mains[0], mains[0].read_text(), [path for path in paths if path.suffix == ".cu"]
    except (OSError, UnicodeDecodeError):
        return None


def binding_to_main(sources, build_directory) -> MovedBinding | None:
    """load_inline of a `.cu` that writes its own PYBIND11_MODULE (functions=None, an empty C++
    source): its `main.cpp` is the bare torch/extension.h include, compiled (with the shared PCH)
    for nothing. The binding (binding_split.py: the block, declarations of the functions it
    calls) is compiled there instead, and nvcc told to compile the `.cu`'s kernels only
    (split_nvcc.BINDING_IN_MAIN_ENV): one parse of torch/extension.h fewer than the binding in a
    translation unit of its own. None where that does not apply; the caller builds as written if
    the build fails (a binding that needs more of the source than its functions)."""
    found = _load_inline_main(sources, build_directory)
    if found is None:
        return None
    main, main_text, cuda_sources = found
    if len(cuda_sources) != 1:
        return None
    (cuda,) = cuda_sources
    try:
        cuda_text = cuda.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    if main_text.strip() != BARE_MAIN or not binding_split.BLOCK_START.search(cuda_text):
        return None
    parts = binding_split.split(cuda_text, str(cuda.resolve()))
    if isinstance(parts, str):
        return None
    from torch.utils import cpp_extension

    lean_text, why_not_lean = header_diet.lean_binding(parts.binding, str(main.resolve()),
                                                       cpp_extension.include_paths())
    if why_not_lean:
        logger.info("the moved binding is compiled on torch/extension.h: %s", why_not_lean)
    moved = MovedBinding(main, main_text, Path(build_directory), main_text + parts.binding, lean_text)
    main.write_text(lean_text if lean_text is not None else moved.extension_text)
    os.environ[split_nvcc.BINDING_IN_MAIN_ENV] = str(cuda.resolve())
    return moved


# The module load_inline writes into main.cpp for functions=[...] (each m.def on a line of its own).
LOAD_INLINE_MODULE = re.compile(r"^PYBIND11_MODULE\(TORCH_EXTENSION_NAME, m\) \{$", re.M)


def lean_declared_main(sources, build_directory) -> MovedBinding | None:
    """load_inline of CUDA code whose binding `main.cpp` holds (functions=[...]: torch/extension.h,
    the C++ source's declarations and the module load_inline writes): `main.cpp`'s lean copy
    (header_diet.lean_binding, on the lean binding's shared PCH) in its place for the build. On
    the H100, such a main.o on torch/extension.h's PCH took 12-18 s against 8.6-11 s for a lean
    binding (docs/measured.md, "Builds"). None where that does not apply (no `.cu`: a C++
    build's kernels are main.cpp's own; a main.cpp of the candidate's own; a copy the lean rules
    refuse; once failed in this build directory)."""
    found = _load_inline_main(sources, build_directory)
    if found is None:
        return None
    main, main_text, cuda_sources = found
    if not cuda_sources:
        return None
    if not main_text.startswith(BARE_MAIN + "\n") or not LOAD_INLINE_MODULE.search(main_text):
        return None
    from torch.utils import cpp_extension

    lean_text, why_not_lean = header_diet.lean_binding(main_text, str(main.resolve()), cpp_extension.include_paths())
    if lean_text is None:
        logger.info("main.cpp is compiled as written: %s", why_not_lean)
        return None
    main.write_text(lean_text)
    return MovedBinding(main, main_text, Path(build_directory), main_text, lean_text)


def niced(call, increment: int):
    """`call()` in a thread of its own, `increment` nice levels below the calling thread (Linux
    keeps a nice value per thread, and a child process starts with its forking thread's): the
    compilers a build starts take the CPU after timed work elsewhere on the machine, and this
    worker's own later calls keep its priority, with no privilege needed to lower a priority.
    Its value, or its exception, comes back as if it had been called here."""
    outcome: dict = {}

    def body() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + increment))
        except OSError:  # never refused for a lower priority; a build at the same one is fine
            pass
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001  re-raised in the caller's thread
            outcome["error"] = error

    builder = threading.Thread(target=body, name="cudaagent-build")
    builder.start()
    builder.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]

