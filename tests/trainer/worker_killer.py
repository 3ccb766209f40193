"""A pytest plugin for test_xdist_scorer: the xdist worker itself dies (os._exit) on a candidate
under a `kill-worker` folder, as a worker would on a fault of the evaluator or the machine.
Loaded through PYTEST_ADDOPTS into the scorer's pytest run."""

import os


def pytest_runtest_call(item):
    pair = getattr(item, "pair", None)
    if pair is not None and "kill-worker" in str(pair.candidate) and os.environ.get("PYTEST_XDIST_WORKER"):
        os._exit(1)
