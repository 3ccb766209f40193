"""What a CUDA context costs a process when several start at once (#41, pure-PyTorch evaluations).

Each evaluation opens two contexts (the reference's worker and the candidate's), each a child
forked from a zygote that imported torch without touching CUDA. In a batch of eight their
`reference` and `correctness` phases took 2.6 s and 1.7 s at the median, against 0.7 s and 0.3-1.3
s alone, with the machine's CPUs 50-60% busy (H100, fifteenth session): this asks how much of
that is the driver's own start and teardown when N processes do it together. Every child is
forked from this process after `import torch` (as the zygote's are), then times: CUDA's start
(`torch.cuda.init()` and a first allocation), a first cuBLAS call (its handle and kernels), a
256 MiB copy each way, and its exit (the context's teardown, timed by the parent from the child's
last message to its reaping).

    python -m experiments.cuda_start_contention [--processes 1,8,16] [--repeats 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import sys
import time

STEPS = ("cuda_start", "first_cublas", "copies", "exit")


def _child(write_fd: int, release_fd: int) -> None:
    """In a forked child: wait for the release, time each step, write the times, exit."""
    import torch

    os.read(release_fd, 1)
    times = {}
    began = time.perf_counter()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    times["cuda_start"] = time.perf_counter() - began
    began = time.perf_counter()
    square = torch.ones(256, 256, device="cuda")
    (square @ square).sum().item()
    times["first_cublas"] = time.perf_counter() - began
    began = time.perf_counter()
    host = torch.empty(64 * 2**20, dtype=torch.float32)  # 256 MiB, pageable as a shared set is
    on_device = host.to("cuda")
    on_device.cpu()
    times["copies"] = time.perf_counter() - began
    os.write(write_fd, (json.dumps(times) + "\n").encode())
    os._exit(0)


def run_wave(count: int) -> list[dict]:
    """`count` children started together; each one's step times, its exit timed here."""
    release_read, release_write = os.pipe()
    children = []
    for _ in range(count):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            try:
                _child(write_fd, release_read)
            finally:
                os._exit(1)
        os.close(write_fd)
        children.append((pid, read_fd))
    os.write(release_write, b"x" * count)
    # Each child's answer when it comes and its reaping when it ends, whatever the order: read in
    # turn, a child that answered early had long exited by the time its answer was read.
    answers, said, reaped, status_of = {}, {}, {}, {}
    by_fd = {read_fd: pid for pid, read_fd in children}
    waiting, running = set(by_fd), {pid for pid, _ in children}
    while waiting or running:
        ready, _, _ = select.select(list(waiting), [], [], 0.001) if waiting else ([], [], [])
        for read_fd in ready:
            pid = by_fd[read_fd]
            answers[pid] = os.read(read_fd, 65536).decode()
            if answers[pid]:  # not the end of a pipe whose child died first
                said[pid] = time.perf_counter()
            waiting.discard(read_fd)
            os.close(read_fd)
        # Our children only, by pid: waitpid(-1) would reap the caller's other children too.
        for pid in list(running):
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                reaped[pid], status_of[pid] = time.perf_counter(), status
                running.discard(pid)
        if not waiting and running:
            time.sleep(0.001)  # only exits left to see: no core spun while they tear down
    rows = []
    for pid, _ in children:
        line = answers.get(pid, "")
        code = os.waitstatus_to_exitcode(status_of[pid])
        row = json.loads(line) if line.strip() else {"error": f"child exited with code {code} before answering"}
        if pid in said:
            row["exit"] = max(0.0, reaped[pid] - said[pid])
        rows.append(row)
    os.close(release_read)
    os.close(release_write)
    return rows


def summarise(waves: dict[int, list[list[dict]]]) -> list[dict]:
    """Per process count: each step's median and worst over every child of every repeat."""
    table = []
    for count, repeats in waves.items():
        rows = [row for wave in repeats for row in wave if "error" not in row]
        entry = {"processes": count, "children": len(rows),
                 "failed": sum("error" in row for wave in repeats for row in wave)}
        for step in STEPS:
            values = [row[step] for row in rows if step in row]
            entry[f"{step}_median_s"] = statistics.median(values) if values else None
            entry[f"{step}_max_s"] = max(values) if values else None
        table.append(entry)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,8,16", help="how many start together, per wave (comma list)")
    parser.add_argument("--repeats", type=int, default=2, help="waves per count")
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args(argv)
    counts = [int(value) for value in args.processes.split(",") if value]
    if not counts or min(counts) < 1 or args.repeats < 1:
        parser.error("--processes takes counts of 1 or more, --repeats 1 or more")
    # Asked through NVML, not the CUDA runtime: a runtime that has started here makes every
    # forked child fail ("Cannot re-initialize CUDA in forked subprocess").
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch  # before any fork, as the zygote does; CUDA not touched here

    if not torch.cuda.is_available():
        print("cuda_start_contention: no CUDA GPU visible; run it on the GPU machine", file=sys.stderr)
        return 2
    waves = {count: [run_wave(count) for _ in range(args.repeats)] for count in counts}
    table = summarise(waves)
    import pandas as pd

    print(pd.DataFrame(table).to_markdown(index=False, floatfmt=".3f"))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"table": table, "waves": {str(k): v for k, v in waves.items()}}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
