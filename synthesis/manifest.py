"""The run's manifest: one record per candidate task, appended as JSON lines while the run goes
(so a stopped run resumes where it was) and written as parquet at the end; and the run's
sessions (each start and end), so a run spread over several sessions has a rate per hour."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pytest_cudaagent.records.state_files import read_json_lines, write_line

MANIFEST_LINES = "manifest.jsonl"
MANIFEST_PARQUET = "manifest.parquet"
SESSIONS_LINES = "sessions.jsonl"


@dataclass
class TaskRecord:
    id: str
    origin: str
    source_hash: str
    operators: list[str]
    families: list[str]
    input_shapes: list[list[int]]
    dtype: str
    kept: bool
    reasons: list[str]
    details: dict[str, str] = field(default_factory=dict)
    checks: dict[str, str] = field(default_factory=dict)
    eager_ms: float | None = None
    compile_ms: float | None = None
    batch_size: int | None = None
    output_shapes: list[list[int]] = field(default_factory=list)
    filter_seconds: dict[str, float] = field(default_factory=dict)
    path: str | None = None  # the kept task's file, relative to the run directory
    lock_wait_seconds: float = 0.0  # of filter_seconds, waiting for the device lock
    finished_at: float | None = None  # Unix time the record was written


def _check_session(entry: dict) -> None:
    if not isinstance(entry["session"], int):
        raise ValueError("a session number is an integer")


class Manifest:
    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.lines_path = self.run_dir / MANIFEST_LINES
        self.records: dict[str, TaskRecord] = {}
        # A line cut short by a kill is skipped (its candidate is filtered again on resume) and
        # named in `skipped_message`, for the run to print.
        lines = read_json_lines(self.lines_path, check=lambda entry: self._add(TaskRecord(**entry)))
        self.skipped_message = lines.skipped_message()

    def _add(self, record: TaskRecord) -> None:
        self.records[record.id] = record

    def append(self, record: TaskRecord) -> None:
        write_line(self.lines_path, json.dumps(dataclasses.asdict(record)))
        self._add(record)

    def start_session(self, **settings) -> int:
        """Records a session's start (with its settings); returns its number."""
        number = len(self.sessions())
        self._append_session({"session": number, "started_at": time.time(), **settings})
        return number

    def end_session(self, number: int) -> None:
        self._append_session({"session": number, "ended_at": time.time()})

    def _append_session(self, entry: dict) -> None:
        write_line(self.run_dir / SESSIONS_LINES, json.dumps(entry))

    def sessions(self) -> list[dict]:
        """One dict per session: started_at, its settings, and ended_at when it ended cleanly."""
        merged: dict[int, dict] = {}
        lines = read_json_lines(self.run_dir / SESSIONS_LINES, check=_check_session)
        for entry in lines.records:
            merged.setdefault(entry["session"], {}).update(entry)
        return [merged[number] for number in sorted(merged)]

    def frame(self) -> pd.DataFrame:
        rows = []
        for record in self.records.values():
            row = dataclasses.asdict(record)
            # Nested values as JSON text: one flat, typed table that any parquet reader loads.
            for key in ("input_shapes", "output_shapes", "details", "checks", "filter_seconds"):
                row[key] = json.dumps(row[key])
            rows.append(row)
        frame = pd.DataFrame(rows, columns=[f.name for f in dataclasses.fields(TaskRecord)])
        # Typed even when empty (a run stopped before its first candidate), so masks work.
        return frame.astype({"kept": bool, "eager_ms": float, "compile_ms": float,
                             "lock_wait_seconds": float, "finished_at": float})

    def write_parquet(self) -> Path:
        path = self.run_dir / MANIFEST_PARQUET
        self.frame().to_parquet(path, index=False)
        return path
