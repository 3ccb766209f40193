"""Compiled bytecode for a batch's processes where the installation keeps none.

A batch starts many Python processes (pytest's workers, their zygotes, the workers those fork or
spawn), and each imports torch. Where torch was installed without its bytecode and Python may not
write it (PYTHONDONTWRITEBYTECODE, common in container images), every one of them compiles torch's
sources again: on the H200 machine `import torch` took 4.4-5.4 s and torch._dynamo 3-4 s more
per process, most of a batch's first 12 s (CUDAAGENT_TRACE, experiments/start_trace.py). There
the batch's processes keep their bytecode under the cache directory instead (PYTHONPYCACHEPREFIX),
so each module is compiled once per machine, not once per process; nothing is written beside the
installed sources. Where torch has its bytecode beside it, nothing changes.

CUDAAGENT_BYTECODE_CACHE=0 turns this off; =1 turns it on even where torch has its bytecode."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ENABLE_ENV = "CUDAAGENT_BYTECODE_CACHE"
PREFIX_ENV = "PYTHONPYCACHEPREFIX"
NO_WRITE_ENV = "PYTHONDONTWRITEBYTECODE"
SUBDIRECTORY = "bytecode"


def has_bytecode(package: str) -> bool | None:
    """Whether `package`'s own directory holds bytecode of this interpreter's version (None: not
    installed). Read without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return None
    cache = Path(spec.origin).parent / "__pycache__"
    tag = f".{sys.implementation.cache_tag}."
    try:
        return any(tag in name for name in os.listdir(cache))
    except OSError:
        return False


def for_run(env: dict[str, str], cache_dir: Path, package: str = "torch") -> dict[str, str]:
    """`env` for a batch's processes: with the bytecode kept under `cache_dir` where `package`
    (torch) has none beside it, unless the user chose a prefix or turned this off."""
    choice = env.get(ENABLE_ENV, "")
    if choice == "0" or env.get(PREFIX_ENV):
        return dict(env)
    if choice != "1" and has_bytecode(package) is not False:
        return dict(env)
    prefix = Path(cache_dir) / SUBDIRECTORY
    try:
        prefix.mkdir(parents=True, exist_ok=True)
    except OSError:  # an unwritable cache: the processes compile as before
        return dict(env)
    updated = dict(env)
    updated[PREFIX_ENV] = str(prefix.resolve())
    # Written there only: the user's wish not to write beside the installed sources is kept.
    updated.pop(NO_WRITE_ENV, None)
    return updated
