"""Test-wide settings: the `gpu` marker, and one build cache shared by every test of a run so each
C++/CUDA extension compiles once (a build costs 20-40 s on the CI machine)."""

import os
import tempfile

import pytest

os.environ.setdefault("CUDAAGENT_CACHE", os.path.join(tempfile.gettempdir(), "cudaagent-test-cache"))

pytest_plugins = ["pytester"]


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped when none is visible")
    config.addinivalue_line("markers", "slow: builds extensions or trains; minutes on the CI machine")


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU visible (run with the gpu tox env on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
