"""Confinement of the candidate's process: it writes only its scratch and build directories, sees
no other process and no network, runs under limits, and leaves nothing running.

Two sides. The evaluator's `Sandbox` makes the scratch directory and a cgroup, and afterwards kills
whatever is left in the cgroup and removes both. In the spawned worker, `confine` enters new PID,
mount and network namespaces, forks the process that becomes the namespace's init (when it dies
the kernel kills every process in the namespace, however detached), mounts a private /proc and
/dev/shm, sets rlimits, applies Landlock and drops capabilities before the candidate's code is
imported. Each piece that the kernel refuses is left out and named in the report
(`Result.env["sandbox"]`); `missing(report)` says what `--require-sandbox` would refuse.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import multiprocessing
import os
import shutil
import signal
import site
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.config import SANDBOX_READ_PATHS, SandboxLimits
from ..system.fd_wait import readable

# Pieces `--require-sandbox` insists on. "process_limit" is a cgroup's pids.max or, for a user
# other than root, RLIMIT_NPROC (the kernel never applies RLIMIT_NPROC to root); for root without
# a writable cgroup (the H100 machine), the process watch of the sandbox's outer process.
REQUIRED = ("pid_ns", "net_ns", "mount_ns", "private_proc", "landlock", "rlimits", "process_limit")


# The outer process's exit code when its process watch killed the candidate's namespace.
PROCESS_WATCH_EXIT = 86
PROCESS_WATCH_PERIOD_S = 0.02


class SandboxUnavailable(Exception):
    """`--require-sandbox` was given and a required piece of the sandbox is missing here."""


def missing(report: dict) -> list[str]:
    return [piece for piece in REQUIRED if not report.get(piece)]


def refusal(report: dict) -> str:
    return (f"the sandbox is required but {', '.join(missing(report))} could not be applied here "
            f"({'; '.join(report.get('errors', [])) or 'no error given'}); run as root or where "
            "user namespaces, Landlock and a writable cgroup are available, or drop --require-sandbox")


# ----------------------------------------------------------------------------------------------
# The evaluator's side


@dataclass
class Sandbox:
    """The scratch directory and cgroup of one candidate process, owned by the evaluator."""

    scratch: Path
    build_dir: Path
    readable: list[str]  # the candidate's own sources: its file, or its workspace directory
    limits: SandboxLimits
    memory_bytes: int
    cgroup_dirs: list[Path] = field(default_factory=list)
    cgroup_kind: str = ""
    cgroup_error: str = ""  # why no cgroup could be made here, for the report
    lent_bytes: int = 0  # the most the harness has lent the candidate's process (lend_memory)

    @classmethod
    def create(cls, build_dir: Path, readable: list[Path], limits: SandboxLimits, memory_cap_gb: float) -> Sandbox:
        build_dir = build_dir.resolve()
        build_dir.mkdir(parents=True, exist_ok=True)  # must exist before a Landlock rule can name it
        scratch = Path(tempfile.mkdtemp(prefix="cudaagent-scratch-"))
        (scratch / "tmp").mkdir()
        sandbox = cls(scratch, build_dir, [str(p) for p in readable], limits, int(memory_cap_gb * limits.memory_headroom * 1024**3))
        sandbox.cgroup_dirs, sandbox.cgroup_kind, sandbox.cgroup_error = _make_cgroup(
            scratch.name, limits.processes, sandbox.memory_bytes)
        return sandbox

    def env(self) -> dict[str, str]:
        """Where the candidate's tools put their files: temporaries in the scratch directory,
        compiler caches in the build directory so they survive, as the build does, to the next
        evaluation of the same sources."""
        cache = self.build_dir / "cache"
        return {"HOME": str(self.scratch), "TMPDIR": str(self.scratch / "tmp"),
                "XDG_CACHE_HOME": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
                "CUDA_CACHE_PATH": str(cache / "nv"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor")}

    def spec(self, enabled: bool, require: bool) -> dict:
        return {"enabled": enabled, "require": require, "scratch": str(self.scratch),
                "writable": [str(self.scratch), str(self.build_dir)], "readable": self.readable,
                "cgroup_dirs": [str(d) for d in self.cgroup_dirs], "cgroup_kind": self.cgroup_kind,
                "cgroup_error": self.cgroup_error,
                "limits": vars(self.limits)}

    def lend_memory(self, harness_bytes: int) -> None:
        """The cgroup's memory limit raised by what the harness keeps in the candidate's process
        for the call (the inputs and output buffers it lends, its held output copies), as the
        evaluator's own watch of the cap leaves them out (channel.Worker.harness_bytes): at full
        KernelBench sizes those are tens of GiB, and the cgroup alone killed honest candidates."""
        # Never lowered: a limit written below what the group holds makes the kernel reclaim or
        # OOM-kill at once, and what was lent for an earlier call may still be in its pages.
        if harness_bytes <= self.lent_bytes:
            return
        self.lent_bytes = harness_bytes
        limit = str(self.memory_bytes + int(harness_bytes * self.limits.memory_headroom))
        for group in self.cgroup_dirs:
            for file_name in ("memory.max", "memory.limit_in_bytes"):
                path = group / file_name
                if path.exists():
                    try:
                        path.write_text(limit)
                    except OSError:
                        pass  # the limit as made stands; the watch still applies its own

    def close(self) -> None:
        """Kill whatever the candidate left in its cgroup, then remove the cgroup and the scratch."""
        _empty_cgroup(self.cgroup_dirs)
        shutil.rmtree(self.scratch, ignore_errors=True)


def _own_cgroup(hierarchy: str) -> str | None:
    """This process's path in a cgroup hierarchy: "" for v2, else a v1 controller's name."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (hierarchy == "" and controllers == "") or hierarchy in controllers.split(","):
            return path
    return None


def _make_cgroup(name: str, processes: int, memory_bytes: int) -> tuple[list[Path], str, str]:
    """A cgroup with pids.max and a memory limit: v2 where this process's cgroup delegates the
    controllers (enabled in its subtree_control here where that is allowed, as in a VM's root
    cgroup), else the v1 pids and memory hierarchies; none where neither is writable. Returns the
    directories, "v2", "v1" or "", and why none was made."""
    root = Path("/sys/fs/cgroup")
    limits = {"pids": ("pids.max", str(processes)),
              "memory": ("memory.max", str(memory_bytes))}
    v1_memory = ("memory.limit_in_bytes", str(memory_bytes))
    made: list[Path] = []
    try:
        own = _own_cgroup("")
        if (root / "cgroup.controllers").exists() and own is not None:
            parent = root / own.lstrip("/")
            _delegate_v2_controllers(parent, tuple(limits))
            group = parent / name
            group.mkdir()
            made.append(group)
            for file_name, value in limits.values():
                (group / file_name).write_text(value)
            return made, "v2", ""
        for controller in ("pids", "memory"):
            own = _own_cgroup(controller)
            if own is None:
                continue
            group = root / controller / own.lstrip("/") / name
            group.mkdir()
            made.append(group)
            file_name, value = limits["pids"] if controller == "pids" else v1_memory
            (group / file_name).write_text(value)
        return made, "v1" if made else "", "" if made else "no cgroup v1 pids or memory hierarchy"
    except OSError as error:
        _empty_cgroup(made)
        return [], "", f"{error.filename or ''}: {error.strerror or error}"


def _delegate_v2_controllers(parent: Path, controllers: tuple[str, ...]) -> None:
    """Turn the controllers on for the parent's children where they are available but off; where
    the kernel refuses (processes in a non-root parent), creating the limits below says so."""
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    available = set((parent / "cgroup.controllers").read_text().split())
    wanted = [c for c in controllers if c in available and c not in enabled]
    if wanted:
        try:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        except OSError:
            pass


def _empty_cgroup(dirs: list[Path]) -> None:
    deadline = time.monotonic() + 10
    for group in dirs:
        while time.monotonic() < deadline:
            try:
                if (group / "cgroup.kill").exists():
                    (group / "cgroup.kill").write_text("1")
                pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
            except OSError:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.02)


# ----------------------------------------------------------------------------------------------
# The worker's side

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 0x40000
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 1, 38, 24
_SYS_CAPSET, _SYS_LANDLOCK_CREATE, _SYS_LANDLOCK_ADD, _SYS_LANDLOCK_RESTRICT = 126, 444, 445, 446

# Landlock rights (linux/landlock.h); which exist depends on the kernel's ABI version.
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_FS_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
# Device files a candidate may open for reading and writing; the rest of /dev is listed only.
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/nvidia*", "/dev/nvidia-caps/*")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(value: int, what: str) -> int:
    if value < 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")
    return value


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is off or unknown (not x86-64 Linux)."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return 0
    return max(0, _libc().syscall(_SYS_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def confine(settings: dict, run, prepare=None) -> None:
    """In the spawned worker: enter the sandbox, then `run(report)` in the namespace's init
    process. This process stays outside, waits for it and exits as it did; if this process is
    killed, the init gets SIGKILL (PR_SET_PDEATHSIG) and the namespace goes with it.

    `prepare()` runs inside the namespaces, before the rlimits, Landlock and the capability drop:
    the GPU driver is initialised there, since under Landlock it does not start (error 304 on the
    H100 machine, experiments/sandbox_layers.py); the candidate's code runs only after."""
    started = time.perf_counter()
    report = {"enabled": bool(settings["enabled"]), "errors": [], "pid": os.getpid()}
    if not settings["enabled"] or sys.platform != "linux":
        if prepare is not None:
            prepare()
        run(report)
        return
    libc = _libc()
    _join_cgroup(settings, report)
    _enter_namespaces(libc, report)
    # Root without a cgroup has no process limit the kernel enforces: this process, which stays
    # outside and only waits, counts the namespace's processes instead.
    report["process_watch"] = os.geteuid() == 0 and not report.get("cgroup") and report["pid_ns"]
    alive_read, alive_write = os.pipe()  # reads end-of-file once this process is gone
    child = os.fork()
    if child:
        os.closerange(3, alive_write)  # the pipe to the evaluator stays the init's alone
        os.closerange(alive_write + 1, 65536)
        _exit_as(child, settings["limits"]["processes"] if report["process_watch"] else None)
    try:
        os.close(alive_write)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if readable(alive_read, 0):  # it died before PDEATHSIG was armed
            os._exit(1)
        os.close(alive_read)
        # As the evaluator's /proc names this process (the private /proc mounted next names it 1).
        report["pid"] = _pid_outside()
        _private_mounts(libc, report)
        os.chdir(settings["scratch"])
        if prepare is not None:
            prepare()
        # TMPDIR now names the scratch directory. multiprocessing copies the parent's temporary
        # directory into its children; the socket that passes tensors' memory must be bound here.
        tempfile.tempdir = None
        multiprocessing.current_process()._config.pop("tempdir", None)
        _set_rlimits(settings["limits"], report)
        report["landlock"] = _apply_landlock(libc, settings, report)
        report["capabilities_dropped"] = _drop_capabilities(libc, report)
        report["process_limit"] = (bool(report.get("cgroup")) or (os.getuid() != 0 and "nproc" in report["rlimits"])
                                   or report["process_watch"])
        report["setup_ms"] = round(1000 * (time.perf_counter() - started), 2)  # what entering it cost
        run(report)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _pid_outside() -> int:
    """This process's id in the PID namespace of the /proc mounted now (NSpid's first field)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[1])
    return os.getpid()


def _exit_as(child: int, process_limit: int | None = None) -> None:
    """Wait for the namespace's init and exit as it did; with `process_limit`, kill it (and with
    it every process of the namespace) once the namespace holds more processes than that."""
    while True:
        try:
            pid, status = os.waitpid(child, 0 if process_limit is None else os.WNOHANG)
        except InterruptedError:
            continue
        if pid:
            break
        count = _namespace_process_count(child)
        if count > process_limit:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            sys.stderr.write(f"sandbox: {count} processes in the candidate's namespace, over its limit of "
                             f"{process_limit} (SandboxLimits.processes): the process watch killed them all\n")
            sys.stderr.flush()
            os._exit(PROCESS_WATCH_EXIT)
        time.sleep(PROCESS_WATCH_PERIOD_S)
    if os.WIFSIGNALED(status):
        exit_by_signal(os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def exit_by_signal(number: int) -> None:
    """End this process by the signal that ended the candidate's, so the evaluator reads the same
    cause (a SIGKILL from the kernel's OOM killer above all). SIGKILL and SIGSTOP take no handler:
    setting SIG_DFL for them raised EINVAL, and the worker exited with code 1 instead (#38: two
    level-1 identity candidates, `crashed`, "worker exited with code 1 before giving a verdict")."""
    if number not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number if number != signal.SIGSTOP else signal.SIGKILL)
    os._exit(128 + number)  # not reached


def _namespace_process_count(init: int) -> int:
    """Processes in the candidate's PID namespace. This process shares the namespace's mounts:
    once the init has mounted its private /proc, /proc lists exactly the namespace's processes
    (and /proc/self, this process being outside, does not resolve); before, the init's tree."""
    if not os.path.exists("/proc/self"):
        return sum(1 for entry in os.listdir("/proc") if entry.isdigit())
    import psutil

    from ..system.proc_tree import tree_pids

    try:
        return len(tree_pids(init))
    except psutil.Error:
        return 0


def _join_cgroup(settings: dict, report: dict) -> None:
    try:
        for group in settings["cgroup_dirs"]:
            Path(group, "cgroup.procs").write_text(str(os.getpid()))
        report["cgroup"] = settings["cgroup_kind"] or False
        if settings.get("cgroup_error"):
            report["errors"].append(f"cgroup: {settings['cgroup_error']}")
    except OSError as error:
        report["cgroup"] = False
        report["errors"].append(f"cgroup: {error}")


def _enter_namespaces(libc, report: dict) -> None:
    flags = _CLONE_NEWPID | _CLONE_NEWNS | _CLONE_NEWNET
    if os.geteuid() != 0:  # without root, a user namespace grants the rights for the others
        flags |= _CLONE_NEWUSER
    uid, gid = os.geteuid(), os.getegid()
    try:
        _check(libc.unshare(flags), "unshare")
        if flags & _CLONE_NEWUSER:
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        report.update(pid_ns=True, net_ns=True, mount_ns=True, user_ns=bool(flags & _CLONE_NEWUSER))
    except OSError as error:
        report.update(pid_ns=False, net_ns=False, mount_ns=False, user_ns=False)
        report["errors"].append(str(error))


def _private_mounts(libc, report: dict) -> None:
    """A /proc that shows only the namespace's processes, and a /dev/shm of its own."""
    report["private_proc"] = False
    if not report["mount_ns"]:
        return
    try:
        _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
        _check(libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mount /proc")
        report["private_proc"] = True
        if os.path.isdir("/dev/shm"):
            _check(libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=1777"), "mount /dev/shm")
    except OSError as error:
        report["errors"].append(str(error))


def _set_rlimits(limits: dict, report: dict) -> None:
    import resource

    wanted = {"cpu": (resource.RLIMIT_CPU, limits["cpu_seconds"]),
              "fsize": (resource.RLIMIT_FSIZE, limits["file_size_mb"] * 1024**2),
              "nofile": (resource.RLIMIT_NOFILE, limits["open_files"]),
              "nproc": (resource.RLIMIT_NPROC, limits["processes"]),
              "core": (resource.RLIMIT_CORE, 0)}
    report["rlimits"] = []
    for name, (kind, value) in wanted.items():
        try:
            resource.setrlimit(kind, (value, value))
            report["rlimits"].append(name)
        except (OSError, ValueError) as error:
            report["errors"].append(f"rlimit {name}: {error}")


def _read_paths(settings: dict) -> list[str]:
    package = Path(__file__).resolve().parents[1]  # pytest_cudaagent/, not only workers/
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    cuda = [os.environ.get(name, "") for name in ("CUDA_HOME", "CUDA_PATH")]
    return [*SANDBOX_READ_PATHS, *prefixes, *site.getsitepackages(), str(package), *cuda,
            *_installed_elsewhere(package), *settings["readable"]]


def _installed_elsewhere(package: Path) -> list[str]:
    """Packages the evaluator imports from outside its prefixes: the user's site-packages and
    PYTHONPATH's folders (`pip install --target DIR` with PYTHONPATH=DIR; a Mamba problem's einops
    installed so was unreadable to its own identity candidate: a build_error of ours). Not the
    folder that holds this package's checkout, which `bench` puts on PYTHONPATH for its workers:
    the checkout may hold the problem files, which the candidate must not read."""
    folders = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    folders += os.environ.get("PYTHONPATH", "").split(os.pathsep)
    checkout = package.parent
    return [folder for folder in folders
            if folder and Path(folder).is_dir() and Path(folder).resolve() != checkout]


def _apply_landlock(libc, settings: dict, report: dict) -> int | bool:
    """Read and execute where Python, the compilers and the candidate's own sources live; write
    only in the scratch and build directories; no TCP; no signals or abstract sockets outside."""
    abi = landlock_abi()
    if abi < 1:
        report["errors"].append("Landlock is not available in this kernel")
        return False
    handled_fs = (1 << {1: 13, 2: 14, 3: 15, 4: 15}.get(abi, 16)) - 1
    attr = _RulesetAttr(handled_fs, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(ctypes.c_uint64) * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    try:
        ruleset = _check(libc.syscall(_SYS_LANDLOCK_CREATE, ctypes.byref(attr), ctypes.c_size_t(size),
                                      ctypes.c_uint32(0)), "landlock_create_ruleset")
        try:
            for path in _read_paths(settings):
                _allow(libc, ruleset, path, _FS_READ)
            _allow(libc, ruleset, "/dev", _FS_READ_DIR)
            for pattern in _DEVICES:
                for path in glob.glob(pattern):
                    _allow(libc, ruleset, path, _FS_READ_FILE | _FS_WRITE_FILE | _FS_IOCTL_DEV)
            writable = [*settings["writable"], "/dev/shm"] if report.get("private_proc") else settings["writable"]
            # Nothing else: the timing locks are taken by the evaluating process on the candidate's
            # behalf (locks.device_lock), so no directory is writable by two candidates.
            for path in writable:
                _allow(libc, ruleset, path, handled_fs)
            _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
            _check(libc.syscall(_SYS_LANDLOCK_RESTRICT, ruleset, ctypes.c_uint32(0)), "landlock_restrict_self")
        finally:
            os.close(ruleset)
    except OSError as error:
        report["errors"].append(str(error))
        return False
    return abi


def _allow(libc, ruleset: int, path: str, access: int) -> None:
    if not path:
        return
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path this machine does not have
    try:
        if not os.path.isdir(path):
            access &= _FS_FILE_RIGHTS
        rule = _PathBeneathAttr(access, fd)
        _check(libc.syscall(_SYS_LANDLOCK_ADD, ruleset, 1, ctypes.byref(rule), ctypes.c_uint32(0)),
               f"landlock_add_rule {path}")
    finally:
        os.close(fd)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(libc, report: dict) -> bool:
    """Root without capabilities cannot raise its rlimits, mount, trace or load modules; the
    bounding set is emptied too, so a program it executes gains none back."""
    if os.geteuid() != 0:
        return True
    try:
        cap = 0
        while libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
            cap += 1
        if ctypes.get_errno() != errno.EINVAL:
            _check(-1, f"drop capability {cap}")
        header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
        _check(libc.syscall(_SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)), "capset")
        return True
    except OSError as error:
        report["errors"].append(str(error))
        return False


def probe(settings: dict, conn) -> None:
    """In a spawned process: enter the sandbox and send back what applied."""
    confine(settings, conn.send)


def require_sandbox(limits: SandboxLimits | None = None) -> dict:
    """What the sandbox applies on this machine, tried in a throwaway process; raises
    SandboxUnavailable where a required piece is missing (`--require-sandbox`, before any run)."""
    build_dir = Path(tempfile.mkdtemp(prefix="cudaagent-probe-"))
    sandbox = Sandbox.create(build_dir, [], limits or SandboxLimits(), memory_cap_gb=1.0)
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=probe, args=(sandbox.spec(enabled=True, require=True), sender), daemon=True)
    try:
        process.start()
        sender.close()
        report = receiver.recv() if receiver.poll(60) else {"errors": ["the probe process did not answer"]}
    except EOFError:
        report = {"errors": ["the probe process died before answering"]}
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join(timeout=10)  # reaped, not left a zombie of the caller
        sandbox.close()
        shutil.rmtree(build_dir, ignore_errors=True)
    if missing(report):
        raise SandboxUnavailable(refusal(report))
    return report
