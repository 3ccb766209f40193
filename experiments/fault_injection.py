"""Kills `cudaagent bench` at random moments (SIGTERM/SIGKILL of the parent or its process group,
SIGKILL of an xdist worker, of a candidate's process, of a compiler), resumes after each kill,
and compares with one uninterrupted run: verdicts, duplicate and lost pairs, processes left,
stale files, time lost per kill. Quoted in the README's "Faults and resume"."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from experiments.harness_throughput import fresh_cache_env
from pytest_cudaagent.records.results_file import read_results_file

REPO_ROOT = Path(__file__).resolve().parents[1]
# Every process a run starts inherits this variable (value: the run's token), so a process left
# behind is found whatever its parent or command line became.
MARK = "CUDAAGENT_FAULT_RUN"
# Compiler kills come first, while the build cache is still cold and there are builds to kill.
KINDS = ("kill-compiler", "sigterm-parent", "sigkill-group", "kill-xdist-worker", "kill-candidate",
         "sigkill-parent", "sigterm-group")
COMPILERS = {"cc1plus", "c++", "g++", "gcc", "cc", "ninja", "nvcc", "cicc", "ptxas", "ld"}
# A targeted kill is followed by a SIGTERM to the bench once it has written its next Result (the
# killed pair's, if it gives one) or after this long, so pairs are left for the next kills.
STOP_AFTER_TARGETED_S = 90.0
SETTLE_S = 10.0  # how long the run's processes get to go after it ends, before they count as left
RUN_LIMIT_S = 1800.0


@dataclass
class Attempt:
    index: int
    kind: str  # a KINDS entry, or "finish" for the last, uninterrupted resume
    target: str = ""  # what was killed (name and pid), or why nothing was
    moment_s: float | None = None  # after the attempt started
    wall_s: float = 0.0
    exit_code: int | None = None
    stopped_after_s: float | None = None  # from the kill to the bench's exit
    results_before: int = 0
    results_after: int = 0
    settled_s: float = 0.0  # from the bench's exit until no process of the run was left
    leftover: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)


def bench_command(args, out: Path) -> list[str]:
    command = [sys.executable, "-m", "pytest_cudaagent.cli", "bench", "--device", args.device,
               "--out", str(out), "--baselines", args.baselines, "--resume"]
    for option in ("problems", "candidates", "workers"):
        if getattr(args, option) is not None:
            command += [f"--{option}", str(getattr(args, option))]
    return command


def marked(token: str) -> list[psutil.Process]:
    """Live processes carrying this run's token (zombies are dead, only not yet reaped)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get(MARK) == token \
                    and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def describe(process: psutil.Process) -> str:
    try:
        return f"{process.name()}[{process.pid}]"
    except psutil.Error:
        return f"?[{process.pid}]"


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _spawned_workers(xdist_worker: psutil.Process) -> list[psutil.Process]:
    """The evaluator's worker processes under one xdist worker, oldest first (the reference's is
    spawned before the candidate's)."""
    try:
        children = [child for child in xdist_worker.children()
                    if "spawn_main" in " ".join(child.cmdline())]
        return sorted(children, key=lambda child: child.create_time())
    except psutil.Error:
        return []


def find_target(kind: str, bench_pid: int, token: str) -> psutil.Process | None:
    try:
        return _find_target(kind, bench_pid, token)
    except psutil.Error:  # a process ended while we looked
        return None


def _find_target(kind: str, bench_pid: int, token: str) -> psutil.Process | None:
    tree = _descendants(bench_pid)
    controller = next((p for p in tree if p.ppid() == bench_pid), None)
    xdist_workers = [p for p in tree if controller is not None and p.ppid() == controller.pid]
    if kind == "kill-xdist-worker":
        return xdist_workers[0] if xdist_workers else None
    if kind == "kill-candidate":
        pairs = [_spawned_workers(worker) for worker in xdist_workers]
        return next((spawned[1] for spawned in pairs if len(spawned) >= 2), None)
    if kind == "kill-compiler":
        # Worker processes lead groups of their own, so search by the run's mark, not the tree.
        compilers = [p for p in marked(token) if describe(p).split("[")[0] in COMPILERS]
        return min(compilers, key=lambda p: ("cc1plus", "nvcc", "ninja").index(p.name())
                   if p.name() in ("cc1plus", "nvcc", "ninja") else 3, default=None)
    raise ValueError(kind)


def stale_files(directories: list[Path]) -> list[str]:
    """Files a killed writer leaves that a later run could trip on: torch's build locks (`lock`
    in an extension's build directory: a build waits on it until its timeout) and temporary
    files. The `*.lock` files of flock locks stay on purpose: a lock dies with its holder."""
    found = []
    for directory in directories:
        for path in directory.rglob("*"):
            if path.is_file() and (path.name == "lock" or ".tmp" in path.name):
                found.append(str(path.relative_to(directory.parent)))
    return sorted(found)


def count_results(path: Path) -> int:
    return len(read_results_file(path)[0]) if path.exists() else 0


def settle(token: str) -> tuple[float, list[str]]:
    """Seconds until no process of the run is left (at most SETTLE_S), and those still there."""
    started = time.monotonic()
    while True:
        left = marked(token)
        if not left or time.monotonic() - started > SETTLE_S:
            return time.monotonic() - started, [describe(p) for p in left]
        time.sleep(0.1)


def run_attempt(attempt: Attempt, command: list[str], env: dict, results: Path, log: Path,
                rng: random.Random, expected_s: float, token: str, dirs: list[Path]) -> None:
    attempt.results_before = count_results(results)
    started = time.monotonic()
    with open(log, "a") as handle:
        handle.write(f"\n== attempt {attempt.index}: {attempt.kind}\n")
        handle.flush()
        # A session of its own: "the parent's process group" is then the bench's alone, as when
        # a shell runs it, and killing it does not touch this script.
        bench = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=REPO_ROOT)
        killed_at = None
        if attempt.kind != "finish":
            killed_at = _inject(attempt, bench, rng, expected_s, token, results)
        try:
            bench.wait(timeout=RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    ended = time.monotonic()
    attempt.wall_s = ended - started
    attempt.exit_code = bench.returncode
    if killed_at is not None:
        attempt.moment_s = killed_at - started
        attempt.stopped_after_s = ended - killed_at
    attempt.settled_s, attempt.leftover = settle(token)
    attempt.stale = stale_files(dirs)
    attempt.results_after = count_results(results)


def _inject(attempt: Attempt, bench: subprocess.Popen, rng: random.Random, expected_s: float,
            token: str, results: Path) -> float | None:
    """Kills what `attempt.kind` names at a random moment (within `expected_s`); returns when
    (monotonic), or None if the run ended first."""
    if attempt.kind in ("sigterm-parent", "sigkill-parent", "sigterm-group", "sigkill-group"):
        deadline = time.monotonic() + rng.uniform(2.0, max(3.0, expected_s))
        while time.monotonic() < deadline:
            if bench.poll() is not None:
                attempt.target = "run ended before the kill"
                return None
            time.sleep(0.05)
        number = signal.SIGTERM if attempt.kind.startswith("sigterm") else signal.SIGKILL
        try:
            (os.killpg if attempt.kind.endswith("group") else os.kill)(bench.pid, number)
        except ProcessLookupError:
            attempt.target = "run ended before the kill"
            return None
        attempt.target = f"{'group' if attempt.kind.endswith('group') else 'cudaagent'}[{bench.pid}]"
        return time.monotonic()
    # A process of a given role: wait until one runs, then kill it a random moment later.
    delay = rng.uniform(0.0, 1.0 if attempt.kind == "kill-compiler" else 3.0)
    seen_at = None
    while bench.poll() is None:
        target = find_target(attempt.kind, bench.pid, token)
        if target is not None:
            seen_at = seen_at or time.monotonic()
            if time.monotonic() - seen_at >= delay:
                name = describe(target)
                try:
                    target.kill()
                except psutil.Error:
                    continue
                attempt.target = name
                killed_at = time.monotonic()
                _stop_after_next_result(bench, results)
                return killed_at
        time.sleep(0.05)
    attempt.target = "no such process ran"
    return None


def _stop_after_next_result(bench: subprocess.Popen, results: Path) -> None:
    written, deadline = count_results(results), time.monotonic() + STOP_AFTER_TARGETED_S
    while bench.poll() is None and count_results(results) == written and time.monotonic() < deadline:
        time.sleep(0.2)
    if bench.poll() is None:
        bench.send_signal(signal.SIGTERM)


def verdicts(results: Path) -> tuple[dict[str, list[str]], int]:
    """Statuses per pair (problem <- candidate), in file order; and the lines skipped as cut."""
    found, lines = read_results_file(results) if results.exists() else ([], None)
    by_pair: dict[str, list[str]] = defaultdict(list)
    for result in found:
        by_pair[f"{Path(result.problem).name} <- {Path(result.candidate).name}"].append(result.status)
    return dict(by_pair), len(lines.skipped) if lines else 0


def compare(reference: dict[str, list[str]], faulted: dict[str, list[str]]) -> dict:
    return {
        "identical": all(faulted.get(pair, [None])[-1] == statuses[-1] for pair, statuses in reference.items())
                     and set(faulted) == set(reference),
        "changed": {pair: [statuses[-1], faulted[pair][-1]] for pair, statuses in reference.items()
                    if pair in faulted and faulted[pair][-1] != statuses[-1]},
        "duplicates": sorted(pair for pair, statuses in faulted.items() if len(statuses) > 1),
        "lost": sorted(set(reference) - set(faulted)),
        "extra": sorted(set(faulted) - set(reference)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--problems", help="default: the bundled examples")
    parser.add_argument("--candidates", help="default: the bundled candidates for the device")
    parser.add_argument("--baselines", default="eager", help="bench --baselines (default eager, to keep it short)")
    parser.add_argument("--workers", type=int, help="bench --workers")
    parser.add_argument("--kills", type=int, default=len(KINDS), help=f"kills in a row (default {len(KINDS)}: each kind once)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", help="working directory (default: a new temporary one, kept; an "
                        "earlier run's uninterrupted run there is reused)")
    parser.add_argument("--json", metavar="FILE", help="write every attempt and the comparison as JSON")
    parser.add_argument("--show", metavar="FILE", help="print the tables of a report written by --json; run nothing")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown (for the README)")
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 160))
    report = json.loads(Path(args.show).read_text()) if args.show else run_faults(args, console)
    if args.markdown:
        print(to_markdown(report), end="")
    else:
        print_report(report, console)
    if args.json and not args.show:
        Path(args.json).write_text(json.dumps(report, indent=1))
    comparison = report["comparison"]
    return 0 if comparison["identical"] and not any(a["leftover"] or a["stale"] for a in report["attempts"]) else 1


def run_faults(args, console: Console) -> dict:
    work = Path(args.work or tempfile.mkdtemp(prefix="cudaagent-faults-")).resolve()
    rng = random.Random(args.seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(args.kills)]
    console.print(f"fault injection: {args.kills} kill(s) ({', '.join(kinds)}), device {args.device}, work {work}",
                  highlight=False)

    runs = {}
    for name in ("reference", "faulted"):
        token = uuid.uuid4().hex
        env = dict(os.environ, **fresh_cache_env(work / name / "caches"), **{MARK: token})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        runs[name] = (work / name / "out", env, token)

    out, env, token = runs["reference"]
    saved = work / "reference" / "attempt.json"  # a --work of an earlier run keeps its reference
    if saved.exists():
        reference = Attempt(**json.loads(saved.read_text()))
    else:
        reference = Attempt(0, "finish")
        run_attempt(reference, bench_command(args, out), env, out / "results.jsonl",
                    work / "reference" / "bench.log", rng, 0.0, token, [out, work / "reference" / "caches"])
        saved.write_text(json.dumps(asdict(reference)))
    console.print(f"uninterrupted run: {reference.wall_s:.1f} s, exit {reference.exit_code}, "
                  f"{reference.results_after} result(s)", highlight=False)

    out, env, token = runs["faulted"]
    results, dirs = out / "results.jsonl", [out, work / "faulted" / "caches"]
    planned = max(reference.results_after, 1)
    attempts = []
    for index, kind in enumerate([*kinds, "finish"], start=1):
        # Kill within an even share of the work left, so that later kills find work too.
        remaining = reference.wall_s * max(planned - count_results(results), 1) / planned / (len(kinds) - index + 2)
        attempt = Attempt(index, kind)
        run_attempt(attempt, bench_command(args, out), env, results, work / "faulted" / "bench.log",
                    rng, remaining, token, dirs)
        attempts.append(attempt)
        console.print(f"  {index}. {kind}: {attempt.target or 'ran to the end'}, exit {attempt.exit_code}, "
                      f"results {attempt.results_before} -> {attempt.results_after}, left {len(attempt.leftover)}",
                      highlight=False)

    reference_verdicts, _ = verdicts(runs["reference"][0] / "results.jsonl")
    faulted_verdicts, cut_lines = verdicts(results)
    comparison = compare(reference_verdicts, faulted_verdicts)
    comparison["cut_lines"] = cut_lines
    lost_s = sum(a.wall_s for a in attempts) - reference.wall_s
    return {"machine": f"{platform.node()} ({os.cpu_count()} cores)", "device": args.device, "seed": args.seed,
              "reference": asdict(reference), "attempts": [asdict(a) for a in attempts],
              "reference_verdicts": reference_verdicts, "faulted_verdicts": faulted_verdicts,
              "comparison": comparison, "time_lost_s": lost_s, "time_lost_per_kill_s": lost_s / max(args.kills, 1),
              "work": str(work)}


ATTEMPT_COLUMNS = ("#", "kill", "target", "at s", "exit", "exit after kill s", "results", "settled s",
                   "processes left", "stale files", "attempt s")


def attempt_rows(report: dict) -> list[list[str]]:
    return [[str(a["index"]), a["kind"], a["target"] or "-",
             "-" if a["moment_s"] is None else f"{a['moment_s']:.1f}", str(a["exit_code"]),
             "-" if a["stopped_after_s"] is None else f"{a['stopped_after_s']:.1f}",
             f"{a['results_before']} -> {a['results_after']}", f"{a['settled_s']:.1f}",
             ", ".join(a["leftover"]) or "0", _short(a["stale"]), f"{a['wall_s']:.1f}"]
            for a in report["attempts"]]


def _short(paths: list[str]) -> str:
    """`<extension>/lock` rather than the whole path under the cache."""
    return ", ".join("/".join(Path(path).parts[-2:]) for path in paths) or "0"


def summary_rows(report: dict) -> list[list[str]]:
    comparison = report["comparison"]
    statuses = Counter(statuses[-1] for statuses in report["reference_verdicts"].values())
    return [
        ["uninterrupted run", f"{report['reference']['wall_s']:.1f} s, "
         + ", ".join(f"{status} {count}" for status, count in sorted(statuses.items()))],
        ["identical verdict set", "yes" if comparison["identical"] else "no"],
        ["verdicts changed", "; ".join(f"{pair}: {was} -> {now}" for pair, (was, now)
                                       in comparison["changed"].items()) or "none"],
        ["duplicate pairs", ", ".join(comparison["duplicates"]) or "none"],
        ["lost pairs", ", ".join(comparison["lost"]) or "none"],
        ["cut lines skipped on resume", str(comparison["cut_lines"])],
        ["processes left (after 10 s)", str(sum(len(a["leftover"]) for a in report["attempts"]))],
        ["stale files at the end", str(len(report["attempts"][-1]["stale"]))],
        ["time lost", f"{report['time_lost_s']:.1f} s in all, {report['time_lost_per_kill_s']:.1f} s per kill"],
    ]


def print_report(report: dict, console: Console) -> None:
    table = Table(*ATTEMPT_COLUMNS, title=f"fault injection, {report['device']}, {report['machine']}")
    for row in attempt_rows(report):
        table.add_row(*row)
    console.print(table)
    summary = Table("check", "outcome", title="against one uninterrupted run")
    for row in summary_rows(report):
        summary.add_row(*row)
    console.print(summary)


def to_markdown(report: dict) -> str:
    def lines(columns, rows):
        return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)] + \
               ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines(ATTEMPT_COLUMNS, attempt_rows(report)) + [""]
                     + lines(("check", "outcome"), summary_rows(report))) + "\n"


if __name__ == "__main__":
    sys.exit(main())
