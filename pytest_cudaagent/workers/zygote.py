"""Worker processes forked from a zygote: a process that has imported torch and the workers'
modules once, and forks a fresh child for each worker (#21: `import torch` alone took 4.5 s per
worker on the H100 machine; a fork takes milliseconds).

Isolation is what it was with a spawned worker. Each candidate still runs in a new process,
confined (sandbox.py) before any of its code is imported; the zygote never runs a candidate's code
nor imports a problem, and holds no CUDA context (a child opens its own; a forked context is
unusable). The zygote forks only on requests over a socket pair that it and this process alone
hold: multiprocessing's forkserver listens on a filesystem socket, which a confined candidate
could connect to and ask for an unconfined process. Each child closes every descriptor but its
own pipe before anything else runs, and reseeds what fork would share (numpy's global generator;
Python's `random` reseeds itself).

One zygote per environment: modules read some variables when imported, so a process whose
environment changed since its zygote started gets a new one (the old one ends once its children
have). `CUDAAGENT_ZYGOTE=0` spawns every worker fresh instead, as before (and on other systems)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from multiprocessing import reduction, util
from multiprocessing.connection import Connection

from ..system import start_trace
from ..system.fd_wait import readable, ready

# Imported once in the zygote: what every worker imports before its first request, and what the
# candidate's worker imports before the candidate (the guards' references predate its code).
# torch._dynamo alone took 4.3 s on the H100 machine. Left out: torch._inductor, which may start
# compile workers a fork would not carry, and torch.utils.cpp_extension, which asks the CUDA
# runtime for the device count when imported: that poisons fork (every child then fails with
# "Cannot re-initialize CUDA in forked subprocess") and starts the driver's threads
# (experiments/zygote_fork_check.py shows which import does).
PRELOAD = ("numpy", "torch", "torch._dynamo", "triton", "triton.language",
           "pytest_cudaagent.workers.worker", "pytest_cudaagent.rules.guards", "pytest_cudaagent.timing.timer",
           "pytest_cudaagent.rules.provenance", "pytest_cudaagent.rules.outputs", "pytest_cudaagent.rules.memory",
           "pytest_cudaagent.timing.locks", "pytest_cudaagent.core.conventions", "pytest_cudaagent.core.files",
           "pytest_cudaagent.core.compare", "pytest_cudaagent.timing.backend_settings", "pytest_cudaagent.workers.sandbox",
           "pytest_cudaagent.rules.static_scan", "pytest_cudaagent.rules.rules")
# Of PRELOAD, imported after the zygote has said it is ready, one module at a time while no fork is
# asked for: on the H100 machine `import torch` took 4.3-5.1 s and torch._dynamo (Triton with it)
# 5.1-6.1 s more, whether one interpreter imported them or sixteen at once
# (experiments/import_contention.py), and the first eight evaluations of a batch of eight workers
# waited 4.5-8.3 s for their zygote's first fork. A worker forked before these are in imports what
# it needs itself (the candidate's worker imports torch._dynamo before the candidate's code).
AFTER_READY = ("torch._dynamo", "triton", "triton.language")
# AFTER_READY's imports begin only after the zygote's first fork, once no request has come for
# this long. An import cannot be cut short, and a fork asked for during one waits for all of it:
# on the H200 machine (no bytecode in the image, so each process compiles torch's) torch._dynamo
# took 4-6 s, and a batch's first reference, which needs none of these modules, waited that long
# for its fork behind it (CUDAAGENT_TRACE, experiments/start_trace.py). An evaluation asks for its
# two workers back to back, so both are forked before the imports start; its candidate's worker,
# forked without them, imports them itself (import_after_ready) while the zygote does.
QUIET_BEFORE_LATER_S = 0.5
ENABLE_ENV = "CUDAAGENT_ZYGOTE"
READY_TIMEOUT_S = 600.0  # the first fork waits for the imports (tens of seconds on a cold disk)
EXIT_WAIT_S = 5.0  # a closed zygote's own exit, before it is killed
_STATUS = struct.Struct("i")


class ZygoteUnavailable(Exception):
    """The zygote cannot fork here (it died, or could not import without touching CUDA)."""


def enabled() -> bool:
    return sys.platform.startswith("linux") and os.environ.get(ENABLE_ENV, "1") != "0"


def can_fork(function) -> bool:
    """A function the child can find by name: not one of a script's `__main__`."""
    return enabled() and getattr(function, "__module__", "__main__") != "__main__"


def prestart() -> None:
    """Start this environment's zygote now, so that its imports overlap whatever the process does
    before its first evaluation (a pytest worker's own start and collection)."""
    if enabled():
        _current()


# Variables that change between evaluations and that no import reads: pytest sets
# PYTEST_CURRENT_TEST to each test's id, so keying on it started a zygote, and its torch imports
# (8-12 s on a busy H100 machine), for every evaluation the plugin ran. A child keeps the value
# its zygote started with.
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})


def _current() -> _Zygote:
    """The zygote of this process's environment as it is now, started if need be."""
    environment = tuple(sorted(item for item in os.environ.items() if item[0] not in VOLATILE))
    with _lock:
        zygote = _zygotes.get(environment)
        if zygote is None or not zygote.alive():
            zygote = _zygotes[environment] = _Zygote()
        _end_idle(keep=zygote)
        return zygote


def start(function, args: tuple, child_conn: Connection) -> ZygoteProcess:
    """Fork a child that runs `function(conn, zygote_pid, *args)` on its end of the pipe
    (`child_conn`, which the caller then closes). The child's sys.path and working directory are
    this process's now; its environment is this process's (its zygote started with it)."""
    payload = bytes(reduction.ForkingPickler.dumps((function, args)))
    zygote = _current()
    try:
        return zygote.fork(payload, child_conn.fileno())
    except (OSError, EOFError) as error:  # it died meanwhile: a new one (_current), then say so
        zygote.close()
        try:
            return _current().fork(payload, child_conn.fileno())
        except (OSError, EOFError):
            raise ZygoteUnavailable(f"the worker zygote died twice ({error}); set {ENABLE_ENV}=0 to spawn "
                                    "workers instead") from None


def running_pids() -> list[int]:
    """The pids of this process's live zygotes (tests check none outlives its evaluator)."""
    with _lock:
        return [zygote.process.pid for zygote in _zygotes.values() if zygote.alive()]


class ZygoteProcess:
    """The evaluator's handle on a forked child, as much of multiprocessing.Process as the
    Worker uses. The zygote reaps the child and writes its exit code into a pipe held here."""

    def __init__(self, pid: int, status_fd: int):
        self.pid = pid
        self._status_fd: int | None = status_fd
        self.exitcode: int | None = None
        # Polled from more than one thread (a pool's stopping thread kills what another closes).
        self._lock = threading.Lock()

    def _poll(self, timeout_s: float | None = 0) -> None:
        """Read the exit code if it has come, waiting up to `timeout_s` (None: until it does),
        in short waits so another thread is never held up for long."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self._lock:
                if self._status_fd is None:
                    return
                left = 0.05 if deadline is None else min(0.05, max(0.0, deadline - time.monotonic()))
                if readable(self._status_fd, left):
                    data = os.read(self._status_fd, _STATUS.size)
                    # Nothing written: the zygote died first, and its children were SIGKILLed with it.
                    self.exitcode = _STATUS.unpack(data)[0] if len(data) == _STATUS.size else -signal.SIGKILL
                    self._close_status()
                    return
            if deadline is not None and time.monotonic() >= deadline:
                return

    def is_alive(self) -> bool:
        self._poll()
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        self._poll(timeout)

    def kill(self) -> None:
        if self.is_alive():  # not yet reaped by the zygote, so the pid is still this child's
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        with self._lock:
            self._close_status()

    def _close_status(self) -> None:  # with self._lock held
        if self._status_fd is not None:
            os.close(self._status_fd)
            self._status_fd = None

    def __del__(self):
        if hasattr(self, "_lock"):
            self.close()


# ----------------------------------------------------------------------------------------------
# The evaluator's side

_lock = threading.Lock()
_zygotes: dict[tuple, _Zygote] = {}


def _forget_after_fork() -> None:
    """A process forked from this one (not by the zygote: by code of the user's) must not talk to
    our zygotes: two writers on one control socket would garble both. It starts its own."""
    global _lock, _zygotes
    _lock = threading.Lock()  # another thread may have held it at the fork
    _zygotes = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _end_idle(keep: _Zygote) -> None:
    """Zygotes of an earlier environment end once none of their children lives."""
    for environment, zygote in list(_zygotes.items()):
        if zygote is not keep and not zygote.busy():
            zygote.close()
            del _zygotes[environment]


class _Zygote:
    def __init__(self):
        # The standard library's: torch's own would import torch here first (5.5 s on the H100
        # machine) before the zygote could start importing it; nothing but bytes and descriptors
        # cross this pipe.
        context = multiprocessing.get_context("spawn")
        self.control, child_end = context.Pipe()
        self.process = context.Process(target=_zygote_main,
                                       args=(child_end, PRELOAD, AFTER_READY, QUIET_BEFORE_LATER_S), daemon=True,
                                       name="cudaagent-zygote")
        self.process.start()
        child_end.close()
        self.report: dict | None = None  # the zygote's first message, once its imports are done
        self.children: list[ZygoteProcess] = []
        self._fork_lock = threading.Lock()

    def alive(self) -> bool:
        return self.process.is_alive() and not self.control.closed

    def busy(self) -> bool:
        """Whether a child of this zygote still lives; forgets those that do not."""
        self.children = [child for child in self.children if child.is_alive()]
        return bool(self.children)

    def fork(self, payload: bytes, conn_fd: int) -> ZygoteProcess:
        start_trace.mark("zygote.fork_asked", ready=self.report is not None)
        with self._fork_lock:
            if self.report is None:
                self.report = self._receive(READY_TIMEOUT_S, "finish its imports")
            if self.report["fork_poisoned"]:
                raise ZygoteUnavailable(POISONED)
            status_read, status_write = os.pipe()
            try:
                self.control.send((list(sys.path), os.getcwd(), payload))
                with socket.socket(fileno=os.dup(self.control.fileno())) as channel:
                    reduction.sendfds(channel, [conn_fd, status_write])
            finally:
                os.close(status_write)
            try:
                reply = self._receive(60, "fork")
            except BaseException:
                os.close(status_read)
                raise
            if reply.get("fork_poisoned"):  # an import after it said it was ready (AFTER_READY)
                os.close(status_read)
                self.report["fork_poisoned"] = True
                raise ZygoteUnavailable(POISONED)
            pid = reply["pid"]
            start_trace.mark("zygote.forked", child=pid)
            child = ZygoteProcess(pid, status_read)
            self.busy()  # the ended ones forgotten: one zygote may fork thousands in a trainer's run
            self.children.append(child)
            return child

    def _receive(self, timeout_s: float, what: str) -> dict:
        deadline = time.monotonic() + timeout_s
        while not self.control.poll(0.1):
            if not self.process.is_alive():
                raise EOFError(f"the worker zygote exited with code {self.process.exitcode}")
            if time.monotonic() > deadline:
                raise ZygoteUnavailable(f"the worker zygote did not {what} within {timeout_s:.0f} s")
        return self.control.recv()

    def close(self) -> None:
        """Ends the zygote and reaps it: an exit slower than EXIT_WAIT_S (torch's teardown on a
        loaded machine) is cut short by SIGKILL (it has no child by then: `_end_idle`), never left
        a zombie of a process that may evaluate for days."""
        self.control.close()  # the zygote reads end-of-file and exits
        self.process.join(timeout=EXIT_WAIT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=10)


# ----------------------------------------------------------------------------------------------
# The zygote


POISONED = ("an import of the zygote touched CUDA, so its children could not use the GPU "
            "(experiments/zygote_fork_check.py says which)")


def _import_quietly(name: str) -> None:
    # Triton where it is not installed, or broken: a worker that needs it imports it and says so.
    with contextlib.suppress(Exception):
        __import__(name)


def import_after_ready() -> None:
    """In a candidate's worker, before its sandbox and the candidate's code: AFTER_READY's modules,
    where its zygote forked it before importing them (or it was spawned), so that every candidate
    meets the harness with the same modules in place, imported outside its confinement."""
    for name in AFTER_READY:
        _import_quietly(name)


def _zygote_main(control: Connection, preload: tuple[str, ...], after_ready: tuple[str, ...] = AFTER_READY,
                 quiet_s: float = QUIET_BEFORE_LATER_S) -> None:
    """Import, say so, then fork on request until the evaluator closes its end (or dies: the same
    end-of-file); the modules of `after_ready` are imported after the first fork, one at a time,
    each only once no request has come for QUIET_BEFORE_LATER_S. Its children die with it
    (PDEATHSIG, set by each child)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C ends the evaluator, which ends this
    start_trace.mark("zygote.start", created=start_trace.created())
    later = [name for name in preload if name in after_ready]
    for name in preload:
        if name not in later:
            _import_quietly(name)
    poisoned = _fork_poisoned()
    control.send({"fork_poisoned": poisoned})
    start_trace.mark("zygote.ready")
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the select below
    statuses: dict[int, int] = {}  # child pid -> the write end of its exit-status pipe
    forked_at: float | None = None  # the last fork's time (QUIET_BEFORE_LATER_S)
    while True:
        readable_now = ready([control.fileno(), wake_read], _wait_before_later(later, forked_at, quiet_s))
        if wake_read in readable_now:
            os.read(wake_read, 4096)
            _reap(statuses)
        if control.fileno() not in readable_now:
            if _wait_before_later(later, forked_at, quiet_s) != 0:
                continue  # woken by a child's exit: not yet time for the next import
            if not poisoned:
                name = later.pop(0)
                _import_quietly(name)
                poisoned = _fork_poisoned()
                start_trace.mark("zygote.imported", module=name)
            else:
                later.clear()  # nothing more will be forked
            continue
        try:
            sys_path, cwd, payload = control.recv()
            with socket.socket(fileno=os.dup(control.fileno())) as channel:
                conn_fd, status_fd = reduction.recvfds(channel, 2)
        except (EOFError, OSError):
            return
        if poisoned:  # forked now, the child could not use CUDA: refused, and said why
            os.close(conn_fd)
            os.close(status_fd)
            control.send({"pid": None, "fork_poisoned": True})
            continue
        zygote_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(control, conn_fd, zygote_pid, sys_path, cwd, payload)
        os.close(conn_fd)
        statuses[pid] = status_fd
        control.send({"pid": pid})
        forked_at = time.monotonic()
        _reap(statuses)


def _wait_before_later(later: list[str], forked_at: float | None, quiet_s: float) -> float | None:
    """How long the zygote may wait for a request before its next AFTER_READY import: None (until
    one comes) when no import is left or none has been forked yet, 0 once it may import now."""
    if not later or forked_at is None:
        return None
    return max(0.0, quiet_s - (time.monotonic() - forked_at))


def _fork_poisoned() -> bool:
    """Whether a child forked now could not use CUDA: an import initialised it, or asked the
    CUDA runtime for the device count (torch then marks every forked child as unable to)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) != 0


def _reap(statuses: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status_fd = statuses.pop(pid, None)
        if status_fd is not None:
            os.write(status_fd, _STATUS.pack(os.waitstatus_to_exitcode(status)))
            os.close(status_fd)


def _child(control: Connection, conn_fd: int, zygote_pid: int, sys_path: list[str], cwd: str,
           payload: bytes) -> None:
    """In the forked child: shed everything of the zygote's, then run the function; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        control.close()  # through its owner, which would otherwise close the number again later
        _close_fds_except({0, 1, 2, conn_fd})  # the rest (wake-up pipe, siblings' status pipes) has none
        util._run_after_forkers()  # multiprocessing's own state after a fork (its resource sharer)
        sys.path[:] = sys_path
        os.chdir(cwd)
        _reseed()
        function, args = pickle.loads(payload)
        function(Connection(conn_fd), zygote_pid, *args)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _close_fds_except(keep: set[int]) -> None:
    """Every descriptor the zygote had open, but `keep`: no way back to it or to another child."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:  # the listing's own descriptor, closed by now
                pass


def _reseed() -> None:
    """Generators a fork would share with every sibling; a spawned process seeds them afresh."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))
