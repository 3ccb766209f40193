"""Waits that say what they wait for and who holds it.

The device's timing lock and its untimed-work lock (locks.py) are shared by every run on the
host, on purpose: runs on one host share its devices and CPUs, so a timing beside another run's
work would be wrong whoever started it. A newcomer who starts a second run, or whose last run is
still winding down, must be told so instead of watching a silent wait, and a run must never blame
itself for another's work. So:

- Each holder leaves a note beside the lock it holds (`write_note`): its pid, the command it
  runs, its run id (`CUDAAGENT_RUN_ID`: one per `cudaagent` command, inherited by every process it
  starts) and since when. A holder of untimed work leaves one per process in `<lock>.work.d/`.
- `waiting(...)` around a blocking wait: after `SPEAK_AFTER_S` it says what it waits for and who
  holds it, then again every `REPEAT_S`: into `CUDAAGENT_STATUS_DIR/<pid>.json` when the run has
  a progress line that reads them (`cudaagent bench`), else one line on stderr (`verify`, pytest).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

from ..system.lifetime import alive

RUN_ID_ENV = "CUDAAGENT_RUN_ID"
RUN_COMMAND_ENV = "CUDAAGENT_RUN_COMMAND"
STATUS_DIR_ENV = "CUDAAGENT_STATUS_DIR"
SPEAK_AFTER_S = 2.0
REPEAT_S = 10.0
COMMAND_CHARS = 120


def start_run(command: list[str]) -> str:
    """For a command the user typed: names the run for every process it starts."""
    os.environ.setdefault(RUN_COMMAND_ENV, " ".join(command)[:COMMAND_CHARS])
    return run_id()


def run_id() -> str:
    """This run's id, made once and inherited by every process it starts."""
    value = os.environ.get(RUN_ID_ENV)
    if not value:
        value = os.environ[RUN_ID_ENV] = uuid.uuid4().hex[:12]
    return value


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(word.decode(errors="replace") for word in words if word)
    return text if len(text) <= COMMAND_CHARS else text[: COMMAND_CHARS - 1] + "…"


def _top_command() -> str:
    """The command the user typed, as far as this process can tell: the run's first process
    (CUDAAGENT_RUN_COMMAND, set by the command that made the run id), else this one's."""
    return os.environ.get(RUN_COMMAND_ENV) or _command(os.getpid())


def write_note(path: Path, pid: int | None = None) -> None:
    """Who holds the lock `path` stands for: this process (or `pid`, held on its behalf)."""
    note = {"pid": pid or os.getpid(), "by": os.getpid(), "run": run_id(), "command": _top_command(),
            "since": time.time()}
    # Not state_files.write_atomically: a note is written on every untimed call, and its fsync
    # would put a disk flush on that path for a file nobody needs after a crash.
    temporary = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with contextlib.suppress(OSError):
        temporary.write_text(json.dumps(note))
        os.replace(temporary, path)


def remove_note(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def read_note(path: Path) -> dict | None:
    try:
        note = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) and "pid" in note else None


def _alive(pid: object) -> bool:
    """A pid read from a note (any JSON value) names a running process."""
    return isinstance(pid, int) and alive(pid)


def describe(note: dict | None, now: float | None = None) -> str:
    """'pid 123 of another run (cudaagent bench --out x), for 12 s', in words a user can act on."""
    if note is None:
        return "a holder that left no note (an older cudaagent, or one that just ended)"
    whose = "this run" if note.get("run") == os.environ.get(RUN_ID_ENV) else "another run"
    held_s = max((now or time.time()) - float(note.get("since") or 0), 0)
    return f"pid {note['pid']} of {whose} ({note.get('command', '?')}), for {held_s:.0f} s"


def work_notes(directory: Path) -> list[dict]:
    """The notes of the processes holding untimed work now (those that died are dropped)."""
    notes = []
    with contextlib.suppress(OSError):
        for path in sorted(directory.glob("*.json")):
            note = read_note(path)
            if note is not None and _alive(note.get("by", note["pid"])):
                notes.append(note)
    return notes


def describe_work(directory: Path) -> str:
    notes = work_notes(directory)
    if not notes:
        return "untimed work that ended as the wait did"
    others = sum(note.get("run") != os.environ.get(RUN_ID_ENV) for note in notes)
    lines = "; ".join(describe(note) for note in notes[:3]) + (f"; {len(notes) - 3} more" if len(notes) > 3 else "")
    advice = (" Another cudaagent run shares this host's devices: run one at a time, or give each its own"
              " device, then evaluate the flagged pairs again (--resume keeps the rest)." if others else
              " A step of this run that does not end (a stuck trial) held it; --timeout bounds each step.")
    return lines + "." + advice


@contextlib.contextmanager
def waiting(what: str, note_path: Path | None = None, holders=None):
    """Around a blocking wait for `what`: says after SPEAK_AFTER_S, and every REPEAT_S after,
    what it waits for and who holds it (the note at `note_path`, or `holders()`'s words)."""
    done = threading.Event()
    began = time.monotonic()
    status_dir = os.environ.get(STATUS_DIR_ENV)
    status = Path(status_dir) / f"{os.getpid()}.json" if status_dir else None

    def holder_words() -> str:
        if holders is not None:
            return holders()
        return describe(read_note(note_path)) if note_path is not None else "another process"

    def speak() -> None:
        if done.wait(SPEAK_AFTER_S):
            return
        while True:
            line = f"waiting {time.monotonic() - began:.0f} s for {what}, held by {holder_words()}"
            if status is not None:
                with contextlib.suppress(OSError):
                    status.parent.mkdir(parents=True, exist_ok=True)
                    status.write_text(json.dumps({"waiting": line, "pid": os.getpid(), "since": time.time()}))
            else:
                print(f"cudaagent: {line}", file=sys.stderr, flush=True)
            if done.wait(REPEAT_S):
                return

    speaker = threading.Thread(target=speak, name="cudaagent-waiting", daemon=True)
    speaker.start()
    try:
        yield
    finally:
        done.set()
        speaker.join(timeout=1)
        if status is not None:
            remove_note(status)


def waiting_lines(status_dir: Path) -> list[str]:
    """What the run's processes are waiting for now (for a progress line), longest wait first."""
    found = []
    with contextlib.suppress(OSError):
        for path in status_dir.glob("*.json"):
            try:
                status = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(status, dict) and _alive(status.get("pid")):
                found.append((status.get("since", 0), str(status.get("waiting", ""))))
    return [line for _, line in sorted(found)]
