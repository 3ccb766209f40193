"""How long the parent's output comparison takes, alone and beside other busy processes, for
several chunk sizes: a chunk at or above ATen's grain size (32768 elements) makes every op an
OpenMP parallel region, which stalls when the cores are shared.

    python -m experiments.compare_contention [--elements 16777216] [--processes 6] [--wrong 0,0.5]

A chunk size of 0 is the NumPy way (compare.NUMPY_CHUNK elements at a time, buffers reused),
which host floating-point outputs take now; the others force ATen's chunks.

`--wrong`: fractions of the elements outside the tolerance (0: the common path; 0.5: an
incorrect candidate's output, compared the long way), a row each.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time

import pandas as pd
import torch

from pytest_cudaagent.core import compare
from pytest_cudaagent.core.config import Tolerance


def _compare_ms(chunk: int, elements: int, repeats: int, wrong: float = 0.0) -> float:
    if chunk:  # ATen's chunks, the NumPy way off
        compare.COMPARE_CHUNK, compare.NUMPY_DTYPES = chunk, ()
    want = torch.randn(elements)
    got = want + 1e-6
    if wrong:  # every k-th element off by far more than the tolerance
        got[::max(1, round(1 / wrong))] += 1.0
    started = time.perf_counter()
    for _ in range(repeats):
        compare.compare_outputs(0, [want], [got], {"float32": Tolerance(1e-2, 1e-2)})
    return (time.perf_counter() - started) / repeats * 1000


def _median_ms(chunk: int, elements: int, processes: int, repeats: int, wrong: float) -> float:
    if processes == 1:
        return _compare_ms(chunk, elements, repeats, wrong)
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        times = pool.starmap(_compare_ms, [(chunk, elements, repeats, wrong)] * processes)
    return float(pd.Series(times).median())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=16 << 20, help="fp32 elements per output")
    parser.add_argument("--processes", type=int, default=6, help="processes comparing at once")
    parser.add_argument("--chunks", default="0,16384,32768,262144", help="chunk sizes, comma-separated (0: the NumPy way)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wrong", default="0", help="fractions of elements out of tolerance, comma-separated")
    args = parser.parse_args(argv)
    rows = []
    for wrong in (float(w) for w in args.wrong.split(",")):
        for chunk in (int(c) for c in args.chunks.split(",")):
            rows.append({"wrong fraction": wrong, "chunk (elements)": chunk or f"numpy {compare.NUMPY_CHUNK}",
                         "alone ms": _median_ms(chunk, args.elements, 1, args.repeats, wrong),
                         f"{args.processes} at once, median ms": _median_ms(chunk, args.elements, args.processes,
                                                                             args.repeats, wrong)})
    print(f"{args.elements} fp32 elements per comparison, {torch.get_num_threads()} torch threads per process")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.1f}"))


if __name__ == "__main__":
    main()
