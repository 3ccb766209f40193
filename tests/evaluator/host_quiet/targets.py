"""Processes for tests/evaluator/test_host_quiet.py, importable by name (spawned)."""

import os
import subprocess
import sys

from pytest_cudaagent.timing.host_quiet import untimed_worker
from pytest_cudaagent.timing.locks import device_lock


def thread_cpus(pid: int) -> set[int]:
    """The union of the CPUs every thread of `pid` may run on."""
    cpus = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            cpus |= os.sched_getaffinity(int(task))
        except OSError:
            continue
    return cpus


def untimed(conn, reserved: int) -> None:
    """A worker of the run doing untimed work: answers each request with its threads' CPUs."""
    import torch  # its threads too

    torch.ones(1000).sum()
    untimed_worker(reserved)
    while conn.recv() != "exit":
        conn.send(thread_cpus(os.getpid()))


def holder(conn, reserved: int) -> None:
    """Takes the CPU timing lock; while holding, reports its threads' CPUs and starts a child;
    after "release", reports its own and the child's CPUs again."""
    import torch

    untimed_worker(reserved)
    conn.send(("untimed", thread_cpus(os.getpid())))
    with device_lock("cpu"):
        torch.ones(1000).sum()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        conn.send(("held", thread_cpus(os.getpid()), torch.get_num_threads(), child.pid))
        conn.recv()  # "release"
    conn.send(("released", thread_cpus(os.getpid()), thread_cpus(child.pid)))
    child.kill()
    conn.recv()


def timed_by_another(conn, reserved: int) -> None:
    """A candidate's worker, whose timing lock another process holds on its behalf: reports its
    threads' CPUs on each request; on "fit", fits torch's threads as before its warm-up and
    reports their count."""
    import torch

    from pytest_cudaagent.timing.host_quiet import fit_timed_threads

    torch.set_num_threads(max(2, torch.get_num_threads()))  # more than the reserved core
    torch.ones(1 << 20).sum()  # its intra-op threads started
    untimed_worker(reserved)
    while (request := conn.recv()) != "exit":
        if request == "fit":
            fit_timed_threads("cpu")
            conn.send(torch.get_num_threads())
        else:
            conn.send(thread_cpus(os.getpid()))
