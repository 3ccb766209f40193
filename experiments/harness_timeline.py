"""Where a batch's wall time goes: a timeline of `cudaagent bench` (README, "Harness throughput").

harness_throughput records when each Result reached the results file (`arrivals.json`, seconds
after the batch started) and the GPU timing lock's holds (`CUDAAGENT_LOCK_LOG`). An evaluation's
phases ran one after the other and end at its arrival, so its phases are laid back from there
(`Result.profile["parent.start"]`, `Result.phase_seconds`, then the close), after the time its
candidate's worker ran before its evaluation began (`Result.env["started_ahead_s"]`: started
while the worker's previous candidate was checked, pytest_cudaagent.workers.start_ahead). This prints, per
candidate, when it started and how long each phase took; the time before the first evaluation
started (xdist and the workers' imports); how long the timing lock was held; and draws it all as
one bar per candidate (`--plot`).

    python -m experiments.harness_timeline /tmp/throughput --plot timeline.png
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pytest_cudaagent.core.result import Result

ARRIVALS_FILE = "arrivals.json"
LOCK_LOG_FILE = "timing-locks.log"
# Phases in the order an evaluation runs them (Evaluation.run), after its start.
PHASES = ("sandbox", "reference", "build", "construct", "correctness", "timing", "baselines")
COLOURS = {"ahead": "#aec7e8", "start": "#bbbbbb", "sandbox": "#8c564b", "reference": "#9467bd", "build": "#1f77b4",
           "construct": "#17becf", "correctness": "#2ca02c", "timing": "#d62728", "baselines": "#ff7f0e",
           "close": "#7f7f7f"}


class ArrivalWatch:
    """Seconds after `began` at which each new line of a results JSONL appeared (polled)."""

    def __init__(self, results_path: Path, began: float, poll_s: float = 0.1):
        self.results_path, self.began, self.poll_s = Path(results_path), began, poll_s
        self.arrivals: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ArrivalWatch:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()
        self._read()  # what arrived after the last poll

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._read()

    def _read(self) -> None:
        try:
            lines = [line for line in self.results_path.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return
        now = time.perf_counter() - self.began
        for line in lines[len(self.arrivals):]:
            try:
                candidate = json.loads(line)["candidate"]
            except (ValueError, KeyError):
                candidate = "?"
            self.arrivals.append({"candidate": Path(candidate).name, "arrived_s": round(now, 3)})


@dataclass
class Lane:
    candidate: str
    status: str
    arrived_s: float
    segments: list[tuple[str, float, float]] = field(default_factory=list)  # (phase, start, seconds)

    @property
    def started_s(self) -> float:
        """When its evaluation started (after any time its worker ran ahead of it)."""
        begun = [start for phase, start, _ in self.segments if phase != "ahead"]
        return begun[0] if begun else self.arrived_s

    @property
    def ahead_s(self) -> float:
        return sum(seconds for phase, _, seconds in self.segments if phase == "ahead")


def lanes(results: list[Result], arrivals: list[dict]) -> list[Lane]:
    """Each evaluation's phases laid back from its arrival, in the order they ran."""
    arrived = {entry["candidate"]: entry["arrived_s"] for entry in arrivals}
    laid = []
    for result in results:
        name = Path(result.candidate).name
        if name not in arrived:
            continue
        durations = [("start", result.profile.get("parent.start", 0.0))]
        durations += [(phase, result.phase_seconds[phase]) for phase in PHASES if phase in result.phase_seconds]
        durations.append(("close", result.profile.get("parent.close", 0.0) + result.profile.get("parent.tampering", 0.0)))
        at = arrived[name] - sum(seconds for _, seconds in durations)
        lane = Lane(name, result.status, arrived[name])
        ahead = float(result.env.get("started_ahead_s") or 0.0)
        if ahead > 0:
            lane.segments.append(("ahead", at - ahead, ahead))
        for phase, seconds in durations:
            lane.segments.append((phase, at, seconds))
            at += seconds
        laid.append(lane)
    return sorted(laid, key=lambda lane: lane.started_s)


def lock_holds(lock_log: Path, began_unix_ns: int) -> list[tuple[float, float]]:
    """(start, seconds) of each timing-lock hold, in seconds after the batch started."""
    if not lock_log.is_file():
        return []
    holds = []
    for line in lock_log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            acquired, released = int(parts[2]), int(parts[3])
            holds.append(((acquired - began_unix_ns) / 1e9, (released - acquired) / 1e9))
    return sorted(holds)


def summary(laid: list[Lane], holds: list[tuple[float, float]], wall_s: float) -> dict:
    first_start = min((lane.started_s for lane in laid), default=0.0)
    last_arrival = max((lane.arrived_s for lane in laid), default=0.0)
    held = sum(seconds for _, seconds in holds)
    return {"wall_s": round(wall_s, 2), "first_evaluation_started_s": round(first_start, 2),
            "last_result_s": round(last_arrival, 2), "after_last_result_s": round(wall_s - last_arrival, 2),
            "timing_lock_held_s": round(held, 2), "timing_lock_holds": len(holds),
            "timing_lock_busy_share": round(held / wall_s, 3) if wall_s else None}


def print_tables(laid: list[Lane], facts: dict, console: Console) -> None:
    table = Table("candidate", "status", "ahead s", "started s", "arrived s", *PHASES,
                  title="timeline (seconds after the batch started)")
    for lane in laid:
        seconds = {phase: duration for phase, _, duration in lane.segments}
        table.add_row(lane.candidate, lane.status, f"{lane.ahead_s:.1f}" if lane.ahead_s else "-",
                      f"{lane.started_s:.1f}", f"{lane.arrived_s:.1f}",
                      *[f"{seconds[phase]:.1f}" if phase in seconds else "-" for phase in PHASES])
    console.print(table)
    facts_table = Table("fact", "value", title="the batch")
    for name, value in facts.items():
        facts_table.add_row(name, str(value))
    console.print(facts_table)


def plot(laid: list[Lane], holds: list[tuple[float, float]], wall_s: float, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(11, 0.32 * (len(laid) + 2) + 1.5))
    for row, lane in enumerate(laid):
        for phase, start, seconds in lane.segments:
            axes.broken_barh([(start, seconds)], (row - 0.4, 0.8), color=COLOURS[phase])
    timing_row = len(laid) + 0.5
    axes.broken_barh(holds, (timing_row - 0.4, 0.8), color=COLOURS["timing"])
    axes.set_yticks([*range(len(laid)), timing_row], [lane.candidate for lane in laid] + ["GPU timing lock"], fontsize=7)
    axes.axvline(wall_s, color="black", linestyle="--", linewidth=0.8)
    axes.set_xlabel("seconds after `cudaagent bench` started (dashed: it returned; ahead: its worker started "
                    "while the previous candidate was checked)")
    axes.invert_yaxis()
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour) for colour in COLOURS.values()]
    axes.legend(handles, list(COLOURS), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    axes.set_title(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", help="harness_throughput's --work folder, after its harness phase")
    parser.add_argument("--plot", help="write the timeline as a PNG here")
    parser.add_argument("--json", help="write the timeline and its facts here")
    parser.add_argument("--title", default="cudaagent bench: one bar per evaluation")
    args = parser.parse_args(argv)
    work = Path(args.work)
    arrivals_path = work / ARRIVALS_FILE
    if not arrivals_path.is_file():
        print(f"{work} has no {ARRIVALS_FILE}: run harness_throughput --phase harness --work {work} first", file=sys.stderr)
        return 2
    recorded = json.loads(arrivals_path.read_text())
    results = [Result.from_json(line) for line in (work / "harness" / "results.jsonl").read_text().splitlines()
               if line.strip()]
    laid = lanes(results, recorded["arrivals"])
    holds = lock_holds(work / LOCK_LOG_FILE, recorded["began_unix_ns"])
    facts = summary(laid, holds, recorded["wall_s"])
    print_tables(laid, facts, Console(width=None if sys.stdout.isatty() else 200))
    if args.plot:
        plot(laid, holds, recorded["wall_s"], Path(args.plot), args.title)
    if args.json:
        Path(args.json).write_text(json.dumps({"facts": facts, "lanes": [lane.__dict__ for lane in laid],
                                               "timing_lock_holds": holds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
