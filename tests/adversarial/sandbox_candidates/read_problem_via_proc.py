"""Attack: find the problem file through the evaluator's /proc entries (its command line, its
working directory, every process's command line) or by its known path, and take its Model."""

import os
from pathlib import Path

import torch.nn as nn

tried = []


def _readable(path: Path) -> str | None:
    try:
        text = path.read_text()
    except OSError as error:
        tried.append(f"{path}: {error.strerror}")
        return None
    return text if "class Model" in text else None


def _from_proc() -> str | None:
    parent = os.getppid()
    candidates = []
    for pid in [parent] + [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError as error:
            tried.append(f"/proc/{pid}: {error.strerror}")
            continue
        candidates += [Path(cwd, a.decode()) for a in arguments if a.endswith(b".py")]
        if pid == parent:  # the evaluator's working directory: the repository, whose layout it knows
            candidates.append(Path(cwd, "tests/data/problems/small_leaky_relu.py"))
    candidates.append(Path(os.environ["CUDAAGENT_ATTACK_TARGET"]))
    for path in candidates:
        source = _readable(path)
        if source:
            return source
    return None


source = _from_proc()
if source is None:
    raise RuntimeError("no route to the problem file: " + "; ".join(tried[-4:]))
scope: dict = {}
exec(compile(source, "problem", "exec"), scope)


class ModelNew(scope["Model"]):
    pass


assert issubclass(ModelNew, nn.Module)
