"""What the parent's memory check of a worker costs: psutil's recursive walk against the tree's own
/proc children files (pytest_cudaagent/system/proc_tree.py), with other processes running on the machine.

python -m experiments.tree_walk [--others 0 200 500] [--checks 100]

The check runs every 50 ms (channel.py) for the whole evaluation; the last column is the share of
one core it takes at that period.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import psutil
from rich.console import Console
from rich.table import Table

from pytest_cudaagent.system import proc_tree

CHECK_PERIOD_S = 0.05


def psutil_walk(root: int) -> int:
    process = psutil.Process(root)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])


def children_files_walk(root: int) -> int:
    return proc_tree.rss_bytes(proc_tree.tree_pids(root))


def ms_per_check(walk, root: int, checks: int) -> float:
    start = time.perf_counter()
    for _ in range(checks):
        walk(root)
    return (time.perf_counter() - start) / checks * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.tree_walk", description=__doc__.splitlines()[0])
    parser.add_argument("--others", type=int, nargs="+", default=[0, 200, 500],
                        help="other processes running while the tree is walked")
    parser.add_argument("--checks", type=int, default=100)
    args = parser.parse_args(argv)
    # A worker-like tree: a process with a child that has two children (a build's ninja and compilers).
    worker = subprocess.Popen(["bash", "-c", "bash -c 'sleep 600 & sleep 600 & wait' & wait"])
    time.sleep(0.3)
    if not proc_tree.children_files_exist(worker.pid):
        print("this kernel has no children files: both columns are psutil's walk", file=sys.stderr)
    table = Table(title=f"one memory check of a {len(proc_tree.tree_pids(worker.pid))}-process tree, ms "
                        f"(share of a core at one check per {CHECK_PERIOD_S * 1e3:.0f} ms)")
    for column in ("other processes", "machine processes", "psutil walk", "children files", "psutil core %", "files core %"):
        table.add_column(column)
    others: list[subprocess.Popen] = []
    try:
        for count in sorted(args.others):
            others += [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(count - len(others))]
            time.sleep(0.2)
            slow = ms_per_check(psutil_walk, worker.pid, args.checks)
            fast = ms_per_check(children_files_walk, worker.pid, args.checks)
            table.add_row(str(count), str(len(psutil.pids())), f"{slow:.3f}", f"{fast:.3f}",
                          f"{slow / (CHECK_PERIOD_S * 1e3) * 100:.1f}", f"{fast / (CHECK_PERIOD_S * 1e3) * 100:.2f}")
    finally:
        for child in psutil.Process(worker.pid).children(recursive=True):
            child.kill()
        for process in [worker, *others]:
            process.kill()
            process.wait()
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
