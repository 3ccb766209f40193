"""The same set as 1, 2 and 4 shards (docs/multi-node.md): each shard of a count run at once as its
own `cudaagent bench --shard I/N` process with its share of the workers (as N hosts would, here
on one), merged by the leaderboard; checks that the verdicts and the leaderboard are those of the
unsharded run and prints the wall time per shard. Every shard starts with empty caches (its
own build, baseline and inductor caches), as a host of its own would.

    python -m experiments.shards --problems DIR --candidates DIR --device cpu --workers 2 \\
        --bench-args="--no-timing --policy permissive" --out /tmp/shards
    python -m experiments.shards --kernelbench .kernelbench --level 1 --problem-id 1-40 \\
        --candidates CANDS --device cuda --out $OUT/shards --json $OUT/shards.json

One machine holds every shard, so a count's wall time is not N hosts' (they share its cores and
GPUs): what the table shows is the split (pairs per shard), that each shard runs on its own and
that the merge gives the unsharded leaderboard. On one host the sum of the shards' work is the
same; on N hosts a sweep takes about its slowest shard's time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmark.leaderboard import Leaderboard
from benchmark.reports import write_reports
from experiments.harness_throughput import fresh_cache_env

# The leaderboard columns that are verdicts, not times (a timed run's speed columns move with the
# timing noise between runs; a --no-timing run's whole leaderboard.csv is compared byte for byte).
VERDICT_COLUMNS = ("run", "level", "problems", "candidates", "compiled %", "pass@1 %", "correct (fast_0) %",
                   "flagged for review", "problem errors", "harness errors")


def bench_command(args, out: Path, shard: str | None, workers: int) -> list[str]:
    command = [sys.executable, "-m", "pytest_cudaagent.cli", "bench", "--candidates", args.candidates,
               "--device", args.device, "--workers", str(workers), "--out", str(out)]
    if args.kernelbench:
        command += ["--kernelbench", args.kernelbench]
    if args.problems:
        command += ["--problems", args.problems]
    for flag in ("level", "problem_id"):
        if getattr(args, flag):
            command += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    if shard:
        command += ["--shard", shard]
    return command + shlex.split(args.bench_args)


def run_count(args, count: int, root: Path) -> dict:
    """`count` shards at once (count 1: one unsharded run), each with its share of the workers."""
    sweep = root / f"{count}-shards" / "sweep"
    outs = [sweep] if count == 1 else [sweep / f"shard-{index}" for index in range(count)]
    workers = max(1, args.workers // count)
    started, processes = [], []
    for index, out in enumerate(outs):
        out.parent.mkdir(parents=True, exist_ok=True)
        log = open(out.parent / f"{out.name}.log", "w")
        command = bench_command(args, out, f"{index}/{count}" if count > 1 else None, workers)
        log.write(shlex.join(command) + "\n")
        log.flush()
        started.append(time.perf_counter())
        # Each shard its own empty caches (builds, baselines, inductor), as a host of its own has.
        env = os.environ | fresh_cache_env(out.parent / f"{out.name}-cache")
        processes.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    shards = []
    for index, ((process, log), start) in enumerate(zip(processes, started, strict=True)):
        code = process.wait()
        wall = time.perf_counter() - start
        log.close()
        results = outs[index] / "results.jsonl"
        rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
        shards.append({"shards": count, "shard": index, "workers": workers, "exit": code, "wall_s": round(wall, 1),
                       "pairs": len(rows), "problems": len({row["problem"] for row in rows})})
    files = [out / "results.jsonl" for out in outs]
    board = Leaderboard.from_files([file for file in files if file.exists()])
    write_reports(board, sweep.parent / "merged")
    return {"count": count, "shards": shards, "files": [str(f) for f in files], "missing": board.missing,
            "merged": str(sweep.parent / "merged")}


def verdicts(files: list[str]) -> dict[str, tuple]:
    found = {}
    for file in files:
        if Path(file).exists():
            for line in Path(file).read_text().splitlines():
                row = json.loads(line)
                found[f"{Path(row['problem']).name}::{Path(row['candidate']).name}"] = (
                    row["status"], row["passed"], row["reward"])
    return found


def compare(runs: list[dict]) -> None:
    """Against the first (unsharded) run: the pairs' verdicts, leaderboard.csv's verdict columns
    and the whole file."""
    import pandas as pd

    base = runs[0]
    base_csv = Path(base["merged"]) / "leaderboard.csv"
    base_frame = pd.read_csv(base_csv)
    for run in runs:
        csv = Path(run["merged"]) / "leaderboard.csv"
        frame = pd.read_csv(csv)
        columns = [c for c in VERDICT_COLUMNS if c in frame]
        run["verdicts_identical"] = verdicts(run["files"]) == verdicts(base["files"])
        run["verdict_columns_identical"] = frame[columns].equals(base_frame[columns])
        run["leaderboard_csv_identical"] = csv.read_bytes() == base_csv.read_bytes()


def table(runs: list[dict]) -> Table:
    table = Table("shards", "shard", "workers", "problems", "pairs", "wall s", "exit", "sweep wall s (slowest)",
                  "verdicts = unsharded", "leaderboard verdict columns =", "leaderboard.csv byte =",
                  title="one set as 1, 2 and 4 shards, each shard its own process")
    for run in runs:
        slowest = max(shard["wall_s"] for shard in run["shards"])
        for shard in run["shards"]:
            first = shard["shard"] == 0
            table.add_row(str(run["count"]), str(shard["shard"]), str(shard["workers"]), str(shard["problems"]),
                          str(shard["pairs"]), f"{shard['wall_s']:.1f}", str(shard["exit"]),
                          f"{slowest:.1f}" if first else "",
                          *([str(run[k]) for k in ("verdicts_identical", "verdict_columns_identical",
                                                   "leaderboard_csv_identical")] if first else ["", "", ""]))
    return table


def markdown(runs: list[dict]) -> str:
    lines = ["| shards | shard | workers | problems | pairs | wall s | sweep wall s (slowest shard) | verdicts = unsharded "
             "| leaderboard verdict columns = | leaderboard.csv byte = |", "|" + " --- |" * 10]
    for run in runs:
        slowest = max(shard["wall_s"] for shard in run["shards"])
        for shard in run["shards"]:
            first = shard["shard"] == 0
            same = [str(run[k]) for k in ("verdicts_identical", "verdict_columns_identical", "leaderboard_csv_identical")]
            lines.append(f"| {run['count']} | {shard['shard']} | {shard['workers']} | {shard['problems']} | {shard['pairs']} "
                         f"| {shard['wall_s']:.1f} | {f'{slowest:.1f}' if first else ''} | "
                         + " | ".join(same if first else ["", "", ""]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernelbench", help="a KernelBench clone or its dataset files")
    parser.add_argument("--problems", help="a flat directory of problem files")
    parser.add_argument("--level", help="as bench's --level")
    parser.add_argument("--problem-id", help="as bench's --problem-id")
    parser.add_argument("--candidates", required=True)
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    parser.add_argument("--workers", type=int, default=4, help="workers of the unsharded run, shared out among the shards")
    parser.add_argument("--shards", default="1,2,4", help="shard counts, the first the unsharded baseline (default 1,2,4)")
    parser.add_argument("--bench-args", default="", help="more options for every bench, given as --bench-args='--no-timing --policy permissive'")
    parser.add_argument("--out", required=True, help="a fresh directory for the runs")
    parser.add_argument("--json", help="write the table and comparisons here")
    args = parser.parse_args(argv)
    counts = [int(item) for item in args.shards.split(",")]
    if counts[0] != 1:
        parser.error("--shards must start with 1 (the unsharded run everything is compared with)")
    root = Path(args.out)
    if root.exists() and any(root.iterdir()):
        parser.error(f"{root} is not empty; give a fresh --out")
    runs = [run_count(args, count, root) for count in counts]
    compare(runs)
    console = Console(width=200)
    console.print(table(runs))
    for run in runs:
        for line in run["missing"]:
            console.print(f"[red]missing: {line}[/]")
    text = markdown(runs)
    header = f"{date.today().isoformat()}, {platform.node()} ({platform.processor() or platform.machine()}), " \
             f"device {args.device}, {args.workers} worker(s) unsharded, bench {args.bench_args or '(defaults)'}\n\n"
    (root / "shards.md").write_text(header + text)
    print(header + text)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "argv": sys.argv[1:]}, indent=1))
    failed = [run["count"] for run in runs if not (run["verdicts_identical"] and run["verdict_columns_identical"])
              or any(shard["exit"] for shard in run["shards"]) or run["missing"]]
    if failed:
        console.print(f"[red]shard counts {failed} differ from the unsharded run, or a shard failed[/]")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
