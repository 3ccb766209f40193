"""Worker targets for tests/evaluator/test_faults.py (importable by the spawned child)."""

import subprocess


def start_sleeper(conn, spec: dict) -> None:
    """Starts a long child in a process group of its own, as ninja starts a compiler, tells its
    pid and waits."""
    sleeper = subprocess.Popen(["sleep", "300"], process_group=0)
    conn.send({"kind": "started", "sleeper": sleeper.pid})
    sleeper.wait()
