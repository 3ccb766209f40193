"""Which layer of the candidate sandbox a GPU program fails under: each variant forks a process
that has not touched CUDA, applies some of the sandbox's layers in the order `confine` applies
them, then initialises CUDA and runs a kernel. Prints one row per variant.

    python -m benchmark.experiments.sandbox_layers [--json FILE]

Variants: each layer alone, all of them, all but one, and all with CUDA initialised after the
namespaces and mounts but before the rlimits, Landlock and capability drop (what the candidate
worker does: `cuda_first`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pytest_cudaagent import sandbox as box
from pytest_cudaagent.config import SandboxLimits

LAYERS = ("namespaces", "mounts", "rlimits", "landlock", "capabilities")


def variants() -> dict[str, tuple[tuple[str, ...], bool]]:
    """name -> (layers applied, CUDA initialised before the restricting layers)."""
    found = {"none": ((), False), "all": (LAYERS, False), "all, cuda_first": (LAYERS, True)}
    for layer in LAYERS:
        needs = ("namespaces",) if layer == "mounts" else ()
        found[f"{layer} only"] = ((*needs, layer), False)
        found[f"all but {layer}"] = (tuple(x for x in LAYERS if x != layer and not (layer == "namespaces" and x == "mounts")),
                                     False)
    return found


def touch_cuda() -> str:
    import torch

    torch.cuda.init()
    value = (torch.arange(8, device="cuda", dtype=torch.float32) * 2).sum().item()
    return f"ok: {torch.cuda.get_device_name()} sum={value:g}"


def run_variant(layers: tuple[str, ...], cuda_first: bool, settings: dict) -> str:
    """In a forked child (CUDA untouched in this process): the layers, then CUDA; the answer
    comes back through a pipe."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        answer = run_layers(layers, cuda_first, settings)
        os.write(write_end, answer.encode()[:4000])
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read().decode()
    _, status = os.waitpid(child, 0)
    return answer or f"no answer (exit status {status})"


def run_layers(layers: tuple[str, ...], cuda_first: bool, settings: dict) -> str:
    libc, report = box._libc(), {"errors": []}
    try:
        if "namespaces" in layers:
            box._enter_namespaces(libc, report)
            grandchild = os.fork()  # a new PID namespace takes effect for children only
            if grandchild:
                box._exit_as(grandchild)
        else:
            report["mount_ns"] = False
        if "mounts" in layers:
            box._private_mounts(libc, report)
        outcome = touch_cuda() if cuda_first else ""
        if "rlimits" in layers:
            box._set_rlimits(settings["limits"], report)
        if "landlock" in layers:
            box._apply_landlock(libc, settings, report)
        if "capabilities" in layers:
            box._drop_capabilities(libc, report)
        outcome = touch_cuda() if not cuda_first else outcome + "; again after: " + touch_cuda()
    except BaseException as error:  # the answer is the error, whatever it is
        outcome = f"FAILED {type(error).__name__}: {str(error).splitlines()[0][:300]}"
        if os.environ.get("SANDBOX_LAYERS_TRACE"):
            outcome += "\n" + traceback.format_exc()[-1500:]
    if report["errors"]:
        outcome += f" (layer errors: {report['errors']})"
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    build_dir = Path(tempfile.mkdtemp(prefix="sandbox-layers-"))
    sandbox = box.Sandbox.create(build_dir, [], SandboxLimits(), memory_cap_gb=8.0)
    settings = sandbox.spec(enabled=True, require=False)
    console = Console(width=160)
    console.print(f"cgroup: {sandbox.cgroup_kind or 'none'} {sandbox.cgroup_error}; this process's: "
                  f"{Path('/proc/self/cgroup').read_text().strip()!r}; Landlock ABI {box.landlock_abi()}; uid {os.geteuid()}")
    rows = []
    try:
        for name, (layers, cuda_first) in variants().items():
            rows.append({"variant": name, "outcome": run_variant(layers, cuda_first, settings)})
            sys.stdout.flush()
    finally:
        sandbox.close()
    table = Table(title="CUDA under the sandbox's layers")
    table.add_column("variant")
    table.add_column("outcome", overflow="fold")
    for row in rows:
        table.add_row(row["variant"], row["outcome"])
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
