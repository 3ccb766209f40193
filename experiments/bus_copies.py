"""What a level-1 pair at KernelBench's full size pays on the host, step by step: a device tensor
copied into fresh shared memory (the reference's sets, the candidate's outputs), a shared-memory
tensor copied to the device (the inputs lent to the candidate), plain and with the host side
registered for the copy (core/bus_copies.py), and into fresh shared memory whose pages several
threads faulted in first (shared_tensors.populate); and the parent's comparison of two host outputs,
one thread and several (compare._numpy_errors).

    python -m experiments.bus_copies [--gib 0.25,1,6] [--repeats 2] [--json out.json]

Needs a GPU for the copies; the comparison rows run anywhere. Prints a table (seconds, GB/s).
"""

from __future__ import annotations

import argparse
import json
import time

import pandas as pd
import torch

from pytest_cudaagent.core import bus_copies, compare, shared_tensors
from pytest_cudaagent.core.config import Tolerance
from pytest_cudaagent.core.shared_tensors import shared_empty


def _timed(step) -> float:
    started = time.perf_counter()
    step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started


def copy_rows(gib: float, repeats: int) -> list[dict]:
    elements = int(gib * (1 << 30)) // 4
    on_device = torch.randn(elements, device="cuda")
    rows = []
    kept = shared_tensors.POPULATE_FROM_BYTES
    for way, pin_from, populate_from in (("plain", 1 << 62, 1 << 62), ("registered", 0, 1 << 62),
                                         ("populated, registered", 0, kept)):
        bus_copies.PIN_FROM_BYTES, shared_tensors.POPULATE_FROM_BYTES = pin_from, populate_from
        for _ in range(repeats):
            fresh = shared_empty((elements,), torch.float32)
            seconds = _timed(lambda fresh=fresh: bus_copies.copy_across(fresh, on_device))
            rows.append({"step": "device -> fresh shared memory", "way": way, "GiB": gib, "s": seconds})
            seconds = _timed(lambda fresh=fresh: bus_copies.to_device(fresh, "cuda"))
            rows.append({"step": "shared memory -> device", "way": way, "GiB": gib, "s": seconds})
            again = torch.empty_like(on_device)
            seconds = _timed(lambda fresh=fresh, again=again: bus_copies.copy_across(fresh, again))
            rows.append({"step": "device -> shared memory in place", "way": way, "GiB": gib, "s": seconds})
            del fresh, again
    shared_tensors.POPULATE_FROM_BYTES = kept
    return rows


def compare_rows(gib: float, repeats: int) -> list[dict]:
    elements = int(gib * (1 << 30)) // 4
    want = shared_empty((elements,), torch.float32)
    want.copy_(torch.randn(elements))
    got = want + 1e-6
    rows = []
    kept = compare.COMPARE_THREADS
    for threads in (1, kept):
        compare.COMPARE_THREADS = threads
        for _ in range(repeats):
            seconds = _timed(lambda: compare.compare_outputs(0, [want], [got], {"float32": Tolerance(1e-2, 1e-2)}))
            rows.append({"step": "compare two host outputs", "way": f"{threads} thread(s)", "GiB": gib, "s": seconds})
    compare.COMPARE_THREADS = kept
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", default="0.25,1,6")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rows = []
    for gib in (float(g) for g in args.gib.split(",")):
        if torch.cuda.is_available():
            rows += copy_rows(gib, args.repeats)
        rows += compare_rows(gib, args.repeats)
    table = pd.DataFrame(rows).groupby(["step", "way", "GiB"], sort=False)["s"].median().reset_index()
    table["GB/s"] = (table["GiB"] * (1 << 30) / 1e9 / table["s"]).round(2)
    table["s"] = table["s"].round(3)
    print(table.to_string(index=False))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                       "rows": table.to_dict("records")}, out, indent=1)


if __name__ == "__main__":
    main()
