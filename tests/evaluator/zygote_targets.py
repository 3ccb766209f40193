"""Worker targets for tests/evaluator/test_zygote.py (found by name in the forked child)."""

import os
import random
import socket
import stat
import sys


def report_descriptors(conn, spec: dict) -> None:
    """Every descriptor open in the worker, with what it is: a socket, a pipe, a file."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            mode = os.fstat(int(name)).st_mode
        except OSError:  # the listing's own descriptor, closed by now
            continue
        found[int(name)] = "socket" if stat.S_ISSOCK(mode) else "pipe" if stat.S_ISFIFO(mode) else "other"
    conn.send({"kind": "fds", "fds": found, "conn": conn.fileno()})


def report_surroundings(conn, spec: dict) -> None:
    """What the worker inherited: environment, working directory, module path, random state."""
    import numpy

    conn.send({"kind": "surroundings", "mark": os.environ.get("CUDAAGENT_TEST_MARK"), "cwd": os.getcwd(),
               "sys_path": list(sys.path), "numpy": float(numpy.random.random()), "random": random.random(),
               "pid": os.getpid(), "parent": os.getppid()})


def report_and_stay(conn, spec: dict) -> None:
    """report_surroundings, then alive until the evaluator closes the pipe."""
    report_surroundings(conn, spec)
    try:
        conn.recv()
    except EOFError:
        pass


def try_the_zygote_socket(conn, spec: dict) -> None:
    """An attacker's move: ask every socket it holds, but its own pipe, to fork something."""
    answered = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == conn.fileno():
            continue
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.send(b"fork me")
                answered.append(fd)
        except OSError:
            continue
    conn.send({"kind": "tried", "answered": answered})


def report_modules(conn, spec: dict) -> None:
    """Which of the zygote's after-ready modules (and torch._dynamo) the worker found imported."""
    names = ["tests.evaluator.waits_for_a_file_import", "torch._dynamo"]
    conn.send({"kind": "modules", "imported": [name for name in names if name in sys.modules]})
