"""A pytest plugin for batch tests: the pytest worker running a pair whose candidate's name ends
in `_sample_1.py` dies in the middle of it, as a crashed xdist worker does."""

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    pair = getattr(item, "pair", None)
    if pair is not None and pair.candidate.name.endswith("_sample_1.py"):
        os._exit(3)
