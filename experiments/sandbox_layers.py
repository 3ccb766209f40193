"""Which layer of the candidate sandbox a GPU program fails under: each variant forks a process
that has not touched CUDA, applies some of the sandbox's layers in the order `confine` applies
them, then initialises CUDA and runs a kernel. Prints one row per variant.

    python -m experiments.sandbox_layers [--json FILE] [--launches]

Variants: each layer alone, all of them, all but one, and all with CUDA initialised after the
namespaces and mounts but before the rlimits, Landlock and capability drop (what the candidate
worker does: `cuda_first`).

--launches: instead, what one launch costs the host under each layer (CUDA initialised first, as
the worker does), a PyTorch operator's and a Triton kernel's (median of 2000, no synchronisation),
with the Triton launch's profile under all layers: a Triton candidate timed 0.11 ms slower per call
sandboxed than not on the H100 (`timed_call_overhead`), where eager was not."""

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

from pytest_cudaagent.core.config import SandboxLimits
from pytest_cudaagent.workers import sandbox as box

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


def launch_variants() -> dict[str, tuple[tuple[str, ...], bool]]:
    found = {"none": ((), False), "all, cuda_first": (LAYERS, True)}
    for layer in LAYERS:
        found[f"{layer} only, cuda_first"] = ((("namespaces",) if layer == "mounts" else ()) + (layer,), True)
    return found


def _triton_scale():
    """A Triton kernel, made in the measuring process (each variant forks a fresh one)."""
    import triton
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)

    return scale


def launch_costs() -> str:
    """Host time per launch (median us of 2000, no synchronisation), PyTorch's and Triton's, and
    where the Triton launch spends it."""
    import cProfile
    import io
    import pstats
    import time

    import torch

    torch.cuda.init()
    x = torch.randn(1 << 16, device="cuda")
    out = torch.empty_like(x)
    kernel = _triton_scale()

    def triton_launch():
        kernel[(64,)](x, out, x.numel(), BLOCK=1024)

    def torch_launch():
        torch.mul(x, 2, out=out)

    found = []
    for name, launch in (("torch", torch_launch), ("triton", triton_launch)):
        for _ in range(50):
            launch()
        torch.cuda.synchronize()
        costs = []
        for index in range(2000):
            started = time.perf_counter()
            launch()
            costs.append(time.perf_counter() - started)
            if index % 200 == 199:
                torch.cuda.synchronize()  # the launch queue never fills
        torch.cuda.synchronize()
        found.append(f"{name} {1e6 * sorted(costs)[len(costs) // 2]:.1f} us")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(500):
        triton_launch()
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(8)
    # The profile's rows name a file ("/") or a built-in ("{"); the header lines do neither.
    lines = [line for line in text.getvalue().splitlines() if "/" in line or "{" in line][:8]
    return ", ".join(found) + "; triton tottime top: " + " | ".join(" ".join(line.split()) for line in lines)


def run_variant(layers: tuple[str, ...], cuda_first: bool, settings: dict, measure=None) -> str:
    """In a forked child (CUDA untouched in this process): the layers, then CUDA; the answer
    comes back through a pipe."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        answer = run_layers(layers, cuda_first, settings, measure)
        os.write(write_end, answer.encode()[:6000])
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read().decode()
    _, status = os.waitpid(child, 0)
    return answer or f"no answer (exit status {status})"


def run_layers(layers: tuple[str, ...], cuda_first: bool, settings: dict, measure=None) -> str:
    measure = measure or touch_cuda
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
        outcome = measure() if not cuda_first else outcome + "; again after: " + measure()
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
    parser.add_argument("--launches", action="store_true", help="host time per launch under each layer (see above)")
    args = parser.parse_args(argv)
    build_dir = Path(tempfile.mkdtemp(prefix="sandbox-layers-"))
    sandbox = box.Sandbox.create(build_dir, [], SandboxLimits(), memory_cap_gb=8.0)
    os.environ["TRITON_CACHE_DIR"] = str(build_dir / "triton")  # writable under Landlock, as the worker's
    settings = sandbox.spec(enabled=True, require=False)
    console = Console(width=160)
    console.print(f"cgroup: {sandbox.cgroup_kind or 'none'} {sandbox.cgroup_error}; this process's: "
                  f"{Path('/proc/self/cgroup').read_text().strip()!r}; Landlock ABI {box.landlock_abi()}; uid {os.geteuid()}")
    rows = []
    try:
        chosen = launch_variants() if args.launches else variants()
        for name, (layers, cuda_first) in chosen.items():
            outcome = run_variant(layers, cuda_first, settings, launch_costs if args.launches else None)
            rows.append({"variant": name, "outcome": outcome})
            console.print(f"{name}: {outcome}")
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
