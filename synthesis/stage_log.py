"""Where each filter worker is: one line per stage start or progress note (time, worker pid, task,
stage, detail), appended by every worker to one file in the run directory and printed to the
worker's own log, so a task that never finishes, killed at its timeout or with the whole run,
still shows the stage it was in and for how long."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

STAGE_LOG = "stages.log"
DONE = "done"  # the last line of a finished task; its detail is "kept" or the reasons
COLUMNS = ["time", "pid", "task", "stage", "detail"]


def stage_line(pid: int, task_id: str, stage: str, detail: str = "") -> str:
    detail = " ".join(detail.split())  # one line, no tabs
    return f"{time.time():.3f}\t{pid}\t{task_id}\t{stage}\t{detail}\n"


def _parse(line: str) -> list | None:
    fields = line.rstrip("\n").split("\t")
    if len(fields) != len(COLUMNS):
        return None
    try:
        return [float(fields[0]), int(fields[1]), *fields[2:]]
    except ValueError:
        return None


def last_stage(log_text: str, task_id: str) -> tuple[str, str] | None:
    """(stage, detail) of the task's last stage line in a worker's log, which holds other
    output too."""
    for line in reversed(log_text.splitlines()):
        if (fields := _parse(line)) is not None and fields[2] == task_id:
            return fields[3], fields[4]
    return None


def read_stage_log(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    rows = []
    if path.is_file():
        rows = [fields for line in path.read_text(errors="replace").splitlines() if (fields := _parse(line))]
    return pd.DataFrame(rows, columns=COLUMNS)


def in_flight(stages: pd.DataFrame, finished: set[str] | frozenset = frozenset()) -> pd.DataFrame:
    """Tasks whose last line is not `done` and that are not in `finished` (the manifest's ids):
    the stage each was in, what it was doing, and the seconds from the stage's start to the
    log's last line (how long it had been there when the run stopped). Longest first."""
    columns = ["task", "pid", "stage", "detail", "seconds in stage"]
    if stages.empty:
        return pd.DataFrame(columns=columns)
    end = stages["time"].max()
    last = stages.groupby("task", sort=False).tail(1)
    open_tasks = last[(last["stage"] != DONE) & ~last["task"].isin(finished)].copy()
    open_tasks["seconds in stage"] = [end - _stage_start(stages[stages["task"] == task]) for task in open_tasks["task"]]
    return open_tasks.sort_values("seconds in stage", ascending=False)[columns].reset_index(drop=True)


def _stage_start(lines: pd.DataFrame) -> float:
    """When the task's last stage began: the first of the trailing lines that name it."""
    stage, start = lines["stage"].iloc[-1], lines["time"].iloc[-1]
    for line_stage, line_time in zip(lines["stage"].iloc[::-1], lines["time"].iloc[::-1], strict=True):
        if line_stage != stage:
            break
        start = line_time
    return start
