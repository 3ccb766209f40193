"""Fixtures shared by the evaluator's tests."""

import os

import pytest

from pytest_cudaagent.builds import header_diet, split_nvcc


@pytest.fixture
def nvcc_environment():
    """The nvcc wrapper's variables (PYTORCH_NVCC, the real nvcc's, split and diet switches)
    unset for the test and as they were after it (monkeypatch.delenv of an unset variable records
    nothing, so a value fast_build.install set would have outlived the test)."""
    names = ("PYTORCH_NVCC", split_nvcc.REAL_NVCC_ENV, split_nvcc.SPLIT_ENV, header_diet.ENV, header_diet.LEAN_ENV)
    saved = {name: os.environ.pop(name, None) for name in names}
    yield
    for name, value in saved.items():
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value
