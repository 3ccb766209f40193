"""The tools an agent calls inside its workspace, each answering with text written for the model.

`compile`, `verify` and `profile` run the evaluator from this process (outside the workspace), so
nothing the agent writes can change how it is judged. File tools refuse paths outside the
workspace and writes to protected files. `run` is a shell restricted to the workspace by a
lexical path check, a scrubbed environment and a time limit; protected files it changes are put
back. The shell check is a guard-rail for an honest model, not a sandbox: the evaluator's own
hash checks and child processes are what make a verdict trustworthy.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cudaagent import EvalConfig, Result
from pytest_cudaagent.workers.channel import Worker, WorkerDied, WorkerFailure, WorkerTimeout

from .evaluation_pool import EvaluationPool
from .toolcalls import ToolCall
from .workspace import MODEL_NEW_FILE, Workspace, WorkspaceError

# Paths a command may name outside the workspace: the toolchain and harmless devices.
_SYSTEM_PATHS = ("/usr", "/bin", "/lib", "/lib64", "/opt", "/etc/os-release", "/dev/null",
                 "/dev/stdout", "/dev/stderr", "/proc/cpuinfo", "/proc/meminfo")
# Environment a command keeps: enough to find compilers, Python and the GPU, nothing else.
_SHELL_ENV_KEYS = ("PATH", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")
_ERROR_LINE = re.compile(r"error|undefined reference|undefined symbol|fatal|No such file", re.IGNORECASE)
_BUILD_NOISE = re.compile(r"^(FAILED:|ninja: build stopped|\[\d+/\d+\]|Error building extension)")


@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, dict[str, Any]]  # argument name -> JSON schema
    required: tuple[str, ...] = ()

    def to_json_schema(self) -> dict[str, Any]:
        """The OpenAI / chat-template `tools` entry for this tool."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object", "properties": self.parameters, "required": list(self.required)}}}


@dataclass
class ToolOutcome:
    text: str  # what the model reads
    finished: bool = False
    result: Result | None = None  # the evaluator's Result, for verify and profile
    error: bool = False  # the call was refused or malformed


TOOL_SPECS = [
    ToolSpec("read_file", "Read a text file of the workspace.",
             {"path": {"type": "string", "description": "relative path, e.g. model.py"},
              "start_line": {"type": "integer", "description": "first line to show (1-based)"},
              "max_lines": {"type": "integer", "description": "how many lines to show"}}, ("path",)),
    ToolSpec("write_file", "Create or overwrite a file (model_new.py or under kernels/).",
             {"path": {"type": "string"}, "content": {"type": "string", "description": "the whole file"}},
             ("path", "content")),
    ToolSpec("list_files", "List the workspace's files with their sizes.",
             {"path": {"type": "string", "description": "a subdirectory (default: the whole workspace)"}}),
    ToolSpec("run", "Run a shell command in the workspace directory, with a time limit.",
             {"command": {"type": "string"}, "timeout_s": {"type": "number"}}, ("command",)),
    ToolSpec("compile", "Build kernels/ into cuda_extension and import model_new.py; shows the first errors.", {}),
    ToolSpec("verify", "Check ModelNew against Model on five fresh random inputs.", {}),
    ToolSpec("profile", "Time ModelNew against eager PyTorch and torch.compile; lists the kernels that ran.", {}),
    ToolSpec("finish", "End the task; the current workspace is evaluated for the reward.",
             {"summary": {"type": "string", "description": "what you built, in a sentence"}}),
]
_SPECS_BY_NAME = {spec.name: spec for spec in TOOL_SPECS}
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool}


@dataclass
class ToolboxConfig:
    eval_config: EvalConfig = field(default_factory=lambda: EvalConfig(device="cpu"))
    shell_timeout_s: float = 60.0  # a command's default limit; the model may ask for less or more
    max_shell_timeout_s: float = 600.0
    output_chars: int = 6000  # longer tool output is cut, keeping its head and tail


class Toolbox:
    """The tools of one workspace; `call` never raises for anything the model did."""

    def __init__(self, workspace: Workspace, pool: EvaluationPool, config: ToolboxConfig):
        self.workspace = workspace
        self.pool = pool
        self.config = config
        self.specs = TOOL_SPECS
        self._handlers = {"read_file": self.read_file, "write_file": self.write_file,
                          "list_files": self.list_files, "run": self.run, "compile": self.compile,
                          "verify": self.verify, "profile": self.profile, "finish": self.finish}

    def call(self, call: ToolCall) -> ToolOutcome:
        spec = _SPECS_BY_NAME.get(call.name)
        if spec is None:
            return ToolOutcome(f"unknown tool {call.name!r}; the tools are {', '.join(self._handlers)}", error=True)
        problem = _check_arguments(spec, call.arguments)
        if problem:
            return ToolOutcome(f"{call.name}: {problem}", error=True)
        try:
            return self._handlers[call.name](**call.arguments)
        except WorkspaceError as error:
            return ToolOutcome(f"{call.name}: refused: {error}", error=True)

    # -- files ------------------------------------------------------------------------------------

    def read_file(self, path: str, start_line: int = 1, max_lines: int = 400) -> ToolOutcome:
        target = self.workspace.resolve(path)
        if not target.is_file():
            return ToolOutcome(f"{path}: no such file; list_files shows what exists", error=True)
        lines = target.read_text(errors="replace").splitlines()
        first = max(start_line, 1) - 1
        shown = lines[first:first + max(max_lines, 1)]
        header = f"{self.workspace.relative(target)} (lines {first + 1}-{first + len(shown)} of {len(lines)})"
        more = f"\n[{len(lines) - first - len(shown)} more lines: read_file with start_line={first + len(shown) + 1}]" \
            if first + len(shown) < len(lines) else ""
        return ToolOutcome(self._cut(header + "\n" + "\n".join(shown)) + more)

    def write_file(self, path: str, content: str) -> ToolOutcome:
        target = self.workspace.writable(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        relative = self.workspace.relative(target)
        note = ""
        if relative.startswith("kernels/") and target.suffix in (".cu", ".cpp") \
                and target.suffix != self.workspace.kernel_suffix and not target.name.endswith("_binding.cpp"):
            note = (f"\nnote: the device is {self.workspace.device}; kernels there are "
                    f"kernels/*{self.workspace.kernel_suffix} (a .cu file is only built for cuda)")
        return ToolOutcome(f"wrote {relative} ({len(content.splitlines())} lines, {len(content.encode())} bytes){note}")

    def list_files(self, path: str = ".") -> ToolOutcome:
        base = self.workspace.resolve(path)
        prefix = "" if base == self.workspace.root else self.workspace.relative(base) + "/"
        rows = [f"{name}  ({(self.workspace.root / name).stat().st_size} bytes)"
                for name in self.workspace.files() if name.startswith(prefix)]
        return ToolOutcome("\n".join(rows) if rows else f"{path}: no files")

    # -- shell ------------------------------------------------------------------------------------

    def run(self, command: str, timeout_s: float | None = None) -> ToolOutcome:
        refusal = self._shell_refusal(command)
        if refusal:
            return ToolOutcome(f"run: refused: {refusal}", error=True)
        limit = min(timeout_s or self.config.shell_timeout_s, self.config.max_shell_timeout_s)
        root = self.workspace.root
        (root / ".tmp").mkdir(exist_ok=True)
        env = {key: os.environ[key] for key in _SHELL_ENV_KEYS if key in os.environ}
        env.update(HOME=str(root), TMPDIR=str(root / ".tmp"), LANG="C.UTF-8", PYTHONDONTWRITEBYTECODE="1")
        process = subprocess.Popen(["bash", "-c", command], cwd=root, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=limit)
            status = f"exit code {process.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: children of the command too
            output, _ = process.communicate()
            status = f"killed after the {limit:g} s limit"
        restored = self.workspace.restore_protected()
        text = f"$ {command}\n{output.decode(errors='replace').rstrip()}\n[{status}]"
        if restored:
            text += f"\nrefused: the command changed protected files {', '.join(restored)}; they were restored"
        return ToolOutcome(self._cut(text), error=bool(restored))

    def _shell_refusal(self, command: str) -> str | None:
        try:
            words = shlex.split(command)
        except ValueError as error:
            return f"cannot parse the command ({error}); check its quotes"
        root = self.workspace.root
        allowed = (*_SYSTEM_PATHS, sys.prefix, sys.base_prefix)
        for word in words:
            if any(space in word for space in " \t\n"):
                continue  # a quoted string (echo text, code), not a path
            for piece in re.split(r"[=:]", word.lstrip("<>&|;(")):
                if piece.startswith("~"):
                    return f"{piece}: the home directory is outside the workspace"
                if ".." in Path(piece).parts:
                    return f"{piece}: '..' leaves the workspace; use paths inside it"
                if piece.startswith("/"):
                    path = Path(piece).resolve()
                    inside = path == root or root in path.parents
                    if not inside and not any(piece == p or piece.startswith(p.rstrip("/") + "/") for p in allowed):
                        return f"{piece} is outside the workspace; commands run in it, use relative paths"
        return None

    # -- evaluator --------------------------------------------------------------------------------

    def compile(self) -> ToolOutcome:
        workspace = self.workspace
        if not workspace.has_candidate():
            return ToolOutcome(f"compile: no {MODEL_NEW_FILE} yet; write it (and kernels/) first", error=True)
        from pytest_cudaagent.core.files import Candidate

        candidate = Candidate(workspace.root, workspace.root / MODEL_NEW_FILE, workspace=True)
        config = self.config.eval_config
        # The evaluator's build directory for these exact sources: a later verify reuses this build.
        extensions_dir = candidate.extensions_dir(config.cache_dir)
        spec = {"path": str(workspace.root), "model_file": str(candidate.model_file),
                "device": workspace.device, "build_dir": str(extensions_dir / "workspace")}
        worker = Worker(_compile_main, spec, config.memory_cap_gb, env={"TORCH_EXTENSIONS_DIR": str(extensions_dir)},
                        runs_candidate_code=True)
        try:
            reply = worker.receive(config.build_timeout_s)
            return ToolOutcome(f"compile: OK ({reply['sources']} sources built into cuda_extension; "
                               f"{MODEL_NEW_FILE} imports and defines ModelNew)")
        except WorkerFailure as failure:
            if failure.phase == "build":
                return ToolOutcome("compile: FAILED\n" + self._cut(trim_build_log(failure.message, workspace.root)), error=True)
            return ToolOutcome(f"compile: built, but importing {MODEL_NEW_FILE} failed:\n{self._cut(failure.message)}", error=True)
        except (WorkerTimeout, WorkerDied) as problem:
            return ToolOutcome(f"compile: FAILED ({problem})\n{self._cut(worker.log_tail())}", error=True)
        finally:
            worker.close()

    def verify(self) -> ToolOutcome:
        result = self._evaluate(dataclasses.replace(self.config.eval_config, timing=False))
        if result.passed:
            worst = max((t.max_abs_error or 0.0 for t in result.trials), default=0.0)
            text = f"verify: PASSED ({len(result.trials)}/{len(result.trials)} trials; largest abs error {worst:.3g})"
        else:
            text = "verify: " + self._describe_failure(result)
        return ToolOutcome(self._cut(text + _warnings(result)), result=result, error=not result.passed)

    def profile(self) -> ToolOutcome:
        result = self._evaluate(self.config.eval_config)
        if not result.passed:
            return ToolOutcome(self._cut("profile: " + self._describe_failure(result)), result=result, error=True)
        lines = [f"profile: PASSED, reward {result.reward:g}", f"{'':10} {'median ms':>10} {'iqr ms':>9}"]
        for name, stats in result.timing.items():
            lines.append(f"{name:10} {stats.median_ms:10.4f} {stats.iqr_ms:9.4f}")
        goal = self.config.eval_config.reward.compile_speedup
        speedups = [f"{label} {value:.2f}x" for label, value in
                    (("vs eager", result.speedup_vs_eager), ("vs torch.compile", result.speedup_vs_compile)) if value]
        if speedups:
            lines.append("speedup " + ", ".join(speedups) + f" (goal: above {goal:.2f}x vs torch.compile)")
        if result.kernels:
            lines.append("kernels that ran in forward: " + ", ".join(result.kernels[:12]))
        return ToolOutcome(self._cut("\n".join(lines) + _warnings(result)), result=result)

    def finish(self, summary: str = "") -> ToolOutcome:
        return ToolOutcome("finished; the workspace will now be evaluated for the reward", finished=True)

    def evaluate_final(self) -> Result:
        """The full evaluation (correctness and timing) whose milestone reward ends the episode."""
        return self._evaluate(self.config.eval_config)

    def _evaluate(self, config: EvalConfig) -> Result:
        if not self.workspace.has_candidate():
            from .evaluation_pool import unevaluable_result

            return unevaluable_result(str(self.workspace.problem), str(self.workspace.root),
                                      f"no {MODEL_NEW_FILE} yet; write it and its kernels first", self.workspace.device)
        # Never a shared reference: the agent writes each version after reading the last one's
        # Result and log, so a batch's trial inputs would be knowable to it (reference_batch.py).
        return self.pool.evaluate(self.workspace.problem, self.workspace.root,
                                  dataclasses.replace(config, reference_batch=""))

    def _describe_failure(self, result: Result) -> str:
        lines = [result.status.upper()]
        if result.status == "build_error":
            lines.append(trim_build_log((result.error or "") + "\n" + result.log, self.workspace.root))
        elif result.violations:
            lines += [f"violation [{v.rule}]: {v.detail}" for v in result.violations]
        elif result.status == "incorrect":
            failed = [t for t in result.trials if not t.correct]
            lines.append(f"{len(result.trials) - len(failed)}/{len(result.trials)} trials correct")
            first = failed[0]
            detail = first.error or ""
            if first.mismatches is not None:
                detail += f" ({first.mismatches} of {first.numel} elements outside tolerance, " \
                          f"max abs error {first.max_abs_error:.3g}, max rel error {first.max_rel_error:.3g})"
            lines.append(f"first failing trial {first.index}: {detail.strip()}")
        else:
            lines.append(result.error or "no detail")
            if result.log:
                lines.append("log tail:\n" + result.log[-1500:])
        return "\n".join(lines)

    def _cut(self, text: str) -> str:
        return shorten_text(text, self.config.output_chars)


def shorten_text(text: str, max_chars: int) -> str:
    """`text`, or its head and tail with a note of what was left out between them."""
    if len(text) <= max_chars:
        return text
    head, tail = text[: max_chars * 2 // 3], text[-(max_chars // 3):]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters left out ...]\n{tail}"


def trim_build_log(log: str, root: Path, max_lines: int = 40) -> str:
    """The compiler's error lines with the two lines after each (source and caret), paths made
    relative to the workspace; command lines and ninja's progress are left out."""
    log = log.replace(f"{root}/", "")
    lines = [line for line in log.splitlines() if line.strip() and not _BUILD_NOISE.match(line.strip())]
    keep: list[int] = []
    for index, line in enumerate(lines):
        if _ERROR_LINE.search(line) and not line.lstrip().startswith(("c++ ", "g++ ", "/usr", "nvcc ")):
            keep += [i for i in range(index, min(index + 3, len(lines))) if i not in keep]
    chosen = [lines[i] for i in keep] if keep else lines[-max_lines:]
    trimmed = "\n".join(chosen[:max_lines])
    if len(chosen) > max_lines:
        trimmed += f"\n[{len(chosen) - max_lines} more error lines; fix the first ones and compile again]"
    return trimmed


def _warnings(result: Result) -> str:
    if not result.warnings:
        return ""
    return "\nwarnings (not yet violations, but suspicious):\n" + "\n".join(
        f"  [{w.rule}] {w.detail}" for w in result.warnings[:8])


def _check_arguments(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    unknown = sorted(set(arguments) - set(spec.parameters))
    if unknown:
        accepted = ", ".join(spec.parameters) or "no arguments"
        return f"unknown argument(s) {', '.join(unknown)}; {spec.name} takes {accepted}"
    missing = [name for name in spec.required if name not in arguments]
    if missing:
        return f"missing argument(s) {', '.join(missing)}"
    for name, value in arguments.items():
        expected = _JSON_TYPES.get(spec.parameters[name].get("type"))
        if expected and (not isinstance(value, expected) or isinstance(value, bool) and expected is not bool):
            return f"argument {name} must be a {spec.parameters[name]['type']}"
    return None


def _compile_main(conn, spec: dict) -> None:
    """In a spawned child: build the workspace as the evaluator does, then import model_new.py."""
    from pytest_cudaagent.core.files import Candidate, build_workspace_extension, import_file
    from pytest_cudaagent.workers.channel import redirect_stdio

    redirect_stdio(spec["log_path"])
    os.environ.update(spec["env"])
    candidate = Candidate(Path(spec["path"]), Path(spec["model_file"]), workspace=True)
    try:
        build_workspace_extension(candidate, spec["device"], Path(spec["build_dir"]))
    except BaseException as error:
        conn.send({"kind": "error", "phase": "build", "error_type": type(error).__name__, "message": str(error)})
        return
    try:
        module = import_file(candidate.model_file, "cudaagent_candidate")
        if not hasattr(module, "ModelNew"):
            raise AttributeError(f"{MODEL_NEW_FILE} defines no class ModelNew")
    except BaseException as error:
        message = "".join(traceback.format_exception(type(error), error, error.__traceback__)[-3:])
        conn.send({"kind": "error", "phase": "import", "error_type": type(error).__name__, "message": message})
        return
    suffixes = (".cpp", ".cu") if spec["device"] == "cuda" else (".cpp",)
    conn.send({"kind": "built", "sources": sum(s.suffix in suffixes for s in candidate.kernel_sources())})
