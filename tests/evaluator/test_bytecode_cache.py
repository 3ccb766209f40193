"""system/bytecode_cache.py: a batch's processes keep their bytecode under the cache directory where
the installation keeps none, and change nothing where it does."""

import os
import subprocess
import sys

import pytest

from pytest_cudaagent.system import bytecode_cache


@pytest.fixture
def bare_package(tmp_path, monkeypatch):
    """An installed package without bytecode beside it (as torch is where pip ran with --no-compile)."""
    site = tmp_path / "site"
    (site / "barepkg").mkdir(parents=True)
    (site / "barepkg" / "__init__.py").write_text("VALUE = 41 + 1\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_package_without_bytecode_beside_it_is_found_so(bare_package):
    assert bytecode_cache.has_bytecode("barepkg") is False
    cache = bare_package / "barepkg" / "__pycache__"
    cache.mkdir()
    (cache / f"__init__.{sys.implementation.cache_tag}.pyc").write_bytes(b"")
    assert bytecode_cache.has_bytecode("barepkg") is True
    assert bytecode_cache.has_bytecode("no_such_package_anywhere") is None


def test_the_run_keeps_bytecode_under_the_cache_where_the_package_has_none(bare_package, tmp_path):
    env = bytecode_cache.for_run({"PYTHONDONTWRITEBYTECODE": "1", "KEEP": "x"}, tmp_path / "cache", package="barepkg")
    assert env["PYTHONPYCACHEPREFIX"] == str((tmp_path / "cache" / "bytecode").resolve())
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["KEEP"] == "x"
    # A process of the run: the package's bytecode lands under the prefix, none beside the sources,
    # and the next process reads it from there.
    env = {**os.environ, **env, "PYTHONPATH": str(bare_package)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = "import barepkg, sys; print(barepkg.__cached__); assert barepkg.VALUE == 42"
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    cached = first.stdout.strip()
    assert cached.startswith(env["PYTHONPYCACHEPREFIX"]) and os.path.isfile(cached), first.stdout
    assert not (bare_package / "barepkg" / "__pycache__").exists()
    written = os.stat(cached).st_mtime_ns
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert os.stat(cached).st_mtime_ns == written  # read, not compiled and written again


@pytest.mark.parametrize("env", [{"CUDAAGENT_BYTECODE_CACHE": "0"}, {"PYTHONPYCACHEPREFIX": "/elsewhere"}])
def test_the_users_choice_is_kept(bare_package, tmp_path, env):
    assert bytecode_cache.for_run(env, tmp_path / "cache", package="barepkg") == env
    assert not (tmp_path / "cache").exists()


def test_nothing_changes_where_the_package_has_its_bytecode(bare_package, tmp_path):
    (bare_package / "barepkg" / "__pycache__").mkdir()
    (bare_package / "barepkg" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc").write_bytes(b"")
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode_cache.for_run(env, tmp_path / "cache", package="barepkg") == env
    forced = bytecode_cache.for_run({**env, "CUDAAGENT_BYTECODE_CACHE": "1"}, tmp_path / "cache", package="barepkg")
    assert "PYTHONPYCACHEPREFIX" in forced
