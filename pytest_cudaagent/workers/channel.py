"""The parent's side of a worker process: start (forked from the zygote, else spawned), private
pipe, deadlines, memory cap, log capture."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch.multiprocessing as torch_mp

from ..core.step_seconds import StepSeconds
from ..system import proc_tree
from ..system.lifetime import lead_session_and_reap_it
from ..timing import host_quiet
from . import zygote
from .replies import ForbiddenReply, load_reply
from .sandbox import PROCESS_WATCH_EXIT

# The most steps a reply's "steps" may name (_count_steps); a reply naming more adds none.
STEPS_AT_MOST = 16


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    """The worker ended without answering: crash, exit, signal or memory cap."""


@dataclass
class WorkerFailure(Exception):
    """The worker answered with an error in a phase (build, construct, forward, ...)."""

    phase: str
    error_type: str
    message: str

    def __str__(self) -> str:
        return f"{self.phase}: {self.error_type}: {self.message}"


class Worker:
    """A child process running `target(conn, spec)`: forked from the zygote (zygote.py: torch and
    the workers' modules already imported), else spawned. Requests and replies travel on a pipe
    that only the two processes hold; stdout and stderr go to a log file, never to the verdict.
    The child and everything it starts die with the zygote, which ends with this process; a
    spawned child dies with the thread that made the Worker (see lifetime), so a Worker is closed
    by the thread that opened it."""

    def __init__(self, target, spec: dict, memory_cap_gb: float, env: dict[str, str] | None = None,
                 runs_candidate_code: bool = False, reply_keys: dict[str, frozenset[str]] | None = None):
        self._log_dir = tempfile.TemporaryDirectory(prefix="cudaagent-")
        self.log_path = Path(self._log_dir.name) / "worker.log"
        self._env = env or {}
        spec = {**spec, "log_path": str(self.log_path), "env": self._env}
        # The process that starts workers does untimed work of the run too (comparisons, shared
        # copies): off the timed processes' cores, its plan recorded before any worker starts.
        host_quiet.untimed_worker(host_quiet.reserved_in(spec))
        context = torch_mp.get_context("spawn")
        self.conn, child_conn = context.Pipe()
        self.start_method = "spawn"
        self.start_error = ""  # why the zygote could not fork this one, when it could not
        if zygote.can_fork(target):
            try:
                self.process = zygote.start(_forked_main, (target, spec), child_conn)
                self.start_method = "zygote"
            except zygote.ZygoteUnavailable as error:
                self.start_error = str(error)
        if self.start_method == "spawn":
            self.process = context.Process(target=_child_main, args=(target, child_conn, spec, os.getpid()),
                                           daemon=True)
            self.process.start()
        child_conn.close()
        # Its replies may be forged by the candidate: unpickled with only the classes a reply holds,
        # and, given `reply_keys` (each kind of reply's keys), refused unless of a known kind with
        # its keys (a reply the evaluator would fail to read is the candidate's doing, not a crash).
        self.runs_candidate_code = runs_candidate_code
        self.reply_keys = reply_keys
        self.memory_cap_bytes = memory_cap_gb * 1024**3
        self.peak_rss_bytes = 0
        # What the harness itself keeps in this process, beyond the cap (set by the evaluation,
        # from the reference's sizes, never from the worker): the shared buffers lent to it for
        # a call, the host copies it keeps of the correctness calls' outputs (#38).
        self.harness_bytes = 0
        self._killed_for = ""  # why this process killed the worker, for its death reason
        # Workers nobody reads while this one is waited on (one started ahead for the next
        # evaluation, start_ahead.py): their host memory is checked at each poll here too.
        self.also_watch: list[Worker] = []
        self.cpu_s: float | None = None  # the process tree's CPU seconds, once read (cpu_seconds)
        self._asked_to_exit = False  # ("exit",) sent (ask_to_exit)
        # Seconds spent waiting on each kind of request (its name) or unrequested message (the
        # label given to receive), summed: where an evaluation's time went (Result.profile).
        self.seconds: dict[str, float] = {}

    def load(self, spec: dict) -> None:
        """A reference worker kept from an earlier evaluation sent its next problem
        (reused_reference.py): as a new worker's, this evaluation's accounts start afresh."""
        self.send(("load", {**spec, "log_path": str(self.log_path), "env": self._env}))
        self.seconds, self.cpu_s, self.harness_bytes, self.peak_rss_bytes = {}, None, 0, 0
        self.also_watch, self._killed_for = [], ""

    def request(self, message: tuple, timeout_s: float) -> dict:
        started = time.perf_counter()
        self.send(message)
        try:
            reply = self.receive(timeout_s)
        finally:
            self._count(message[0], started)
        self._count_steps(message[0], reply)
        return reply

    def send(self, message: tuple) -> None:
        """A request whose reply is received later (`receive`, with the request's name as label):
        the worker computes while the parent waits on another one. Replies come in request order."""
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError) as error:
            raise WorkerDied(self._death_reason()) from error

    def receive(self, timeout_s: float, label: str | None = None) -> dict:
        started = time.perf_counter()
        try:
            reply = self._receive(timeout_s)
        finally:
            if label is not None:
                self._count(label, started)
        if label is not None:
            self._count_steps(label, reply)
        return reply

    def _count(self, label: str, started: float) -> None:
        StepSeconds(self.seconds).add(label, time.perf_counter() - started)

    def _count_steps(self, label: str, reply: dict) -> None:
        """The worker's own seconds per step of the request, where its reply says them
        (core.step_seconds.StepSeconds), as "<label>.<step>": a profile only, never read for a verdict. A
        candidate's worker could send anything here, so only a few numbers with short names."""
        steps = reply.get("steps")
        if not isinstance(steps, dict) or len(steps) > STEPS_AT_MOST:
            return
        for step, seconds in steps.items():
            if isinstance(step, str) and len(step) <= 40 and type(seconds) is float and 0 <= seconds < 1e6:
                StepSeconds(self.seconds).add(f"{label}.{step}", seconds)

    def _receive(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.conn.poll(0.05):
                try:
                    reply = load_reply(self.conn.recv_bytes()) if self.runs_candidate_code else self.conn.recv()
                except (EOFError, OSError):
                    raise WorkerDied(self._death_reason()) from None
                if self.runs_candidate_code:
                    self._check_shape(reply)
                if reply.get("kind") == "error":
                    raise WorkerFailure(reply["phase"], reply["error_type"], reply["message"])
                return reply
            if not self.process.is_alive():
                raise WorkerDied(self._death_reason())
            self._check_memory()
            for other in self.also_watch:
                other.check_memory_unread()
            if time.monotonic() > deadline:
                self.kill()
                raise WorkerTimeout(f"no answer within {timeout_s:.0f} s")

    def _check_shape(self, reply: object) -> None:
        if not (isinstance(reply, dict) and isinstance(reply.get("kind"), str)):
            raise ForbiddenReply(f"the candidate's process sent a message that is not a reply: {type(reply).__name__}")
        if self.reply_keys is None:
            return
        keys = self.reply_keys.get(reply["kind"])
        if keys is None:
            raise ForbiddenReply(f"the candidate's process sent a reply of no known kind ({reply['kind'][:80]!r})")
        if not keys <= reply.keys():
            raise ForbiddenReply(f"the candidate's process sent a {reply['kind']!r} reply without "
                                 f"{', '.join(sorted(keys - reply.keys()))}")

    def _check_memory(self) -> None:
        try:
            rss = proc_tree.rss_bytes(proc_tree.tree_pids(self.process.pid))
        except psutil.Error:
            return
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        if rss > self.memory_cap_bytes + self.harness_bytes:
            ours = f" plus {self.harness_bytes / 1024**3:.1f} GiB of the harness's own" if self.harness_bytes else ""
            self._killed_for = (f"killed: host memory {rss / 1024**3:.1f} GiB over the cap of "
                                f"{self.memory_cap_bytes / 1024**3:.1f} GiB{ours}")
            self.kill()
            raise WorkerDied(self._killed_for)

    def check_memory_unread(self) -> None:
        """The host-memory cap for a worker no one is reading yet: over it, the worker is killed,
        and its evaluation reads why when it first waits on it."""
        if self.process.is_alive():
            try:
                self._check_memory()
            except WorkerDied:
                pass

    def _death_reason(self) -> str:
        self.process.join(timeout=5)
        if self._killed_for:
            return self._killed_for
        code = self.process.exitcode
        if code is None:
            return "worker stopped answering"
        if code < 0:
            import signal

            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"worker killed by {name}"
        if code == PROCESS_WATCH_EXIT:
            return "killed: the candidate started more processes than its limit (SandboxLimits.processes)"
        return f"worker exited with code {code} before giving a verdict"

    def log_tail(self, max_chars: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-max_chars:]

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=10)

    def _process_tree(self) -> list[psutil.Process]:
        """The worker's process and its descendants (a sandboxed worker runs the candidate in a
        child process); psutil.Error once it has ended."""
        root, *descendants = proc_tree.tree_pids(self.process.pid)
        tree = [psutil.Process(root)]
        for pid in descendants:
            try:
                tree.append(psutil.Process(pid))
            except psutil.NoSuchProcess:  # ended since the walk
                continue
        return tree

    def cpu_seconds(self) -> float | None:
        """CPU seconds of the worker's process tree: each live process's own and those of the
        children it has reaped (a build's compilers, through ninja and the sandbox's init). Read
        once, the first time it is asked or when the worker is closed, and kept; None if the
        worker had ended by then."""
        if self.cpu_s is None:
            self.cpu_s = self.read_cpu_seconds()
        return self.cpu_s

    def read_cpu_seconds(self) -> float | None:
        """The process tree's CPU seconds now (not kept; cpu_seconds keeps its first reading)."""
        try:
            tree = self._process_tree()
        except (psutil.Error, ValueError):
            return None
        total = 0.0
        for process in tree:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system + times.children_user + times.children_system
        return total

    def ask_to_exit(self) -> None:
        """Ask the process to end, without waiting for it (close() waits): an evaluation asks
        both of its workers first, so their exits (a CUDA context's teardown each) overlap."""
        self.cpu_seconds()  # before the process ends and its times with it
        if self.process.is_alive() and not self._asked_to_exit:
            self._asked_to_exit = True
            try:
                self.conn.send(("exit",))
            except (BrokenPipeError, OSError):
                pass

    def close(self) -> None:
        self.ask_to_exit()
        if self.process.is_alive():
            self.process.join(timeout=5)
        self.kill()
        self.conn.close()
        self._log_dir.cleanup()


def _child_main(target, conn, spec: dict, parent_pid: int) -> None:
    lead_session_and_reap_it(parent_pid)
    target(conn, spec)


def _forked_main(conn, zygote_pid: int, target, spec: dict) -> None:
    """In a child of the zygote: as a spawned one, dying with the zygote rather than with us."""
    _child_main(target, conn, spec, zygote_pid)


def redirect_stdio(log_path: str) -> None:
    """In the child: send fd 1 and 2 to the log file, so nothing printed reaches the parent's
    terminal as if it were a verdict."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
