"""What keeping the host quiet for timed calls costs a batch, and what it buys (#40; README, "What a
timed call includes"): a launch-bound forward timed through our Timer beside compilers that keep
every other core busy, with each way of keeping them off it.

    python -m experiments.host_quiet_cost [--device cuda] [--seconds 30] [--json FILE]

Ways, one row each:
- alone: no compilers (the target);
- none: compilers on every core, the timed process among them (the H100 batch's 0.14x);
- reserve: the timed process alone on reserved cores while it holds the timing lock, the compilers
  kept off them (host_quiet.py, what the harness does);
- pause: the compilers' process groups stopped (SIGSTOP) while the lock is held, continued after.
Each row: the timed calls' median and 95th percentile, and the compilers' throughput (compiles per
minute) against `none`. The timed process holds the lock for one Timer.measure (25 ms warm-up,
100 ms of calls) and leaves it for `--gap-ms`, as a batch's timings alternate with untimed work.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

# A translation unit g++ takes about a second on: the standard library's heavier templates.
SOURCE = r"""
#include <map>
#include <regex>
#include <string>
#include <vector>
#include <algorithm>
#include <sstream>
template <int N> struct Unroll { static int run(std::vector<int>& v) { std::sort(v.begin(), v.end()); return Unroll<N - 1>::run(v) + v[N % v.size()]; } };
template <> struct Unroll<0> { static int run(std::vector<int>&) { return 0; } };
int work(const std::string& text) {
  std::map<std::string, std::vector<int>> table;
  std::regex word("[a-z]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), word); it != std::sregex_iterator(); ++it)
    table[it->str()].push_back(static_cast<int>(it->position()));
  std::vector<int> all;
  for (auto& entry : table) all.insert(all.end(), entry.second.begin(), entry.second.end());
  std::ostringstream out; out << all.size();
  return Unroll<64>::run(all) + static_cast<int>(out.str().size());
}
"""
WAYS = ("alone", "none", "reserve", "pause")


def compile_loop(source: Path, counter: Path, reserved: int) -> None:
    """A compiler that never stops (until killed), counting its compiles in `counter`."""
    if reserved:
        from pytest_cudaagent.timing.host_quiet import untimed_worker

        untimed_worker(reserved)
    done = 0
    with tempfile.TemporaryDirectory() as scratch:
        while True:
            subprocess.run(["g++", "-O2", "-std=c++17", "-c", str(source), "-o", f"{scratch}/out.o"], check=True)
            done += 1
            counter.write_text(str(done))


def _start_compilers(count: int, work: Path, reserved: int) -> list[tuple[subprocess.Popen, Path]]:
    source = work / "load.cpp"
    source.write_text(SOURCE)
    compilers = []
    for index in range(count):
        counter = work / f"count-{index}"
        counter.write_text("0")
        # A session of its own: `pause` stops its whole group (the compiler with it).
        process = subprocess.Popen([sys.executable, "-c", "import sys; from experiments.host_quiet_cost import "
                                    "compile_loop; from pathlib import Path; "
                                    f"compile_loop(Path({str(source)!r}), Path({str(counter)!r}), {reserved})"],
                                   start_new_session=True)
        compilers.append((process, counter))
    return compilers


def _compiles(compilers) -> int:
    return sum(int(counter.read_text() or 0) for _, counter in compilers)


@contextmanager
def _paused(compilers):
    for process, _ in compilers:
        os.killpg(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for process, _ in compilers:
            os.killpg(process.pid, signal.SIGCONT)


def _forward(device: str):
    """The issue's exact F.conv_transpose1d (7 us of kernel on the H100), on rotating inputs."""
    import torch

    weight = torch.randn(32, 64, 3, device=device)
    return (lambda x: torch.nn.functional.conv_transpose1d(x, weight)), [[torch.randn(16, 32, 128, device=device)]
                                                                          for _ in range(3)]


def run_way(way: str, device: str, seconds: float, gap_ms: float, compilers_wanted: int, reserved: int) -> dict:
    import torch

    from pytest_cudaagent.core.config import TimingConfig
    from pytest_cudaagent.timing.host_quiet import HOST_ENV, record_host, untimed_worker
    from pytest_cudaagent.timing.locks import device_lock
    from pytest_cudaagent.timing.timer import Clock, Timer

    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        os.environ["CUDAAGENT_LOCK_DIR"] = str(work)
        os.environ.pop(HOST_ENV, None)
        record_host()
        uses_reservation = reserved if way == "reserve" else 0
        untimed_worker(uses_reservation)
        compilers = [] if way == "alone" else _start_compilers(compilers_wanted, work, uses_reservation)
        timer = Timer(Clock(device), TimingConfig(device_time=False))
        fn, content_sets = _forward(device)
        samples: list[float] = []
        try:
            time.sleep(2.0)  # the compilers under way
            start_count, started = _compiles(compilers), time.monotonic()
            with torch.no_grad():
                while time.monotonic() - started < seconds:
                    hold = _paused(compilers) if way == "pause" else _nothing()
                    with device_lock(device), hold:
                        samples += timer.measure(fn, content_sets).samples_ms
                    time.sleep(gap_ms / 1000)
            elapsed = time.monotonic() - started
            compiles = _compiles(compilers) - start_count
        finally:
            for process, _ in compilers:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            untimed_worker(0)
            if hasattr(os, "sched_setaffinity"):
                os.sched_setaffinity(0, record_host().cpus)
    ordered = sorted(samples)
    return {"median_us": 1000 * statistics.median(ordered), "p95_us": 1000 * ordered[int(0.95 * (len(ordered) - 1))],
            "samples": len(ordered), "compiles_per_minute": 60 * compiles / elapsed if compilers else None}


@contextmanager
def _nothing():
    yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--seconds", type=float, default=30.0, help="timing per way")
    parser.add_argument("--gap-ms", type=float, default=200.0, help="untimed spell between two holds of the lock")
    parser.add_argument("--compilers", type=int, help="compilers at once (default: one per core)")
    parser.add_argument("--reserved-cpus", type=int, default=2, help="reserve: CPUs kept for the timed process")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    compilers = args.compilers or os.cpu_count() or 1
    rows = {}
    for way in args.ways.split(","):
        rows[way] = run_way(way, args.device, args.seconds, args.gap_ms, compilers, args.reserved_cpus)
        print(f"{way}: {rows[way]}", flush=True)
    table = Table(title=f"exact F.conv_transpose1d timed beside {compilers} compilers ({args.device})")
    for column in ("way", "median us", "p95 us", "median vs alone", "compiles/min", "vs none"):
        table.add_column(column)
    alone = rows.get("alone", {}).get("median_us")
    busy = rows.get("none", {}).get("compiles_per_minute")
    for way, row in rows.items():
        rate = row["compiles_per_minute"]
        table.add_row(way, f"{row['median_us']:.1f}", f"{row['p95_us']:.1f}",
                      f"{row['median_us'] / alone:.2f}" if alone else "-", f"{rate:.1f}" if rate else "-",
                      f"{rate / busy:.2f}" if rate and busy else "-")
    Console(width=140).print(table)
    if args.json:
        args.json.write_text(json.dumps({"compilers": compilers, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
