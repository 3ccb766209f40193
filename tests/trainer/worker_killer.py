"""A pytest plugin for test_xdist_scorer: the xdist worker itself dies (os._exit) on a candidate
that carries KILL_MARKER, as a worker would on a fault of the evaluator or the machine. Loaded
through PYTEST_ADDOPTS into the scorer's pytest run."""

import os
from pathlib import Path

KILL_MARKER = "# test: kill the xdist worker"


def pytest_runtest_call(item):
    pair = getattr(item, "pair", None)
    if pair is not None and os.environ.get("PYTEST_XDIST_WORKER") and KILL_MARKER in Path(pair.candidate).read_text():
        os._exit(1)
