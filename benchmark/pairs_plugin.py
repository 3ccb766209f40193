"""pytest plugin for batch runs: adds one evaluator item per (problem, candidate) pair listed in a
manifest, for pairings the plugin's own directory mode does not know (KernelBench names, level
subdirectories, dataset problems). Loaded with `-p benchmark.pairs_plugin --bench-pairs FILE`;
the items are the evaluator plugin's own, so results, locks and GPU pinning work as usual."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cudaagent.plugin import CandidateItem, is_xdist_controller
from pytest_cudaagent.records.pairing import Pair
from pytest_cudaagent.workers import reused_reference, zygote


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("cudaagent").addoption(
        "--bench-pairs", default=None,
        help="JSON manifest of pairs to evaluate: [{problem, candidate, sample}] (written by `cudaagent bench`)")


@pytest.hookimpl(trylast=True)  # after the evaluator plugin's: the zygote starts pinned to its GPU
def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("bench_pairs") and not is_xdist_controller(config):
        # The zygote imports torch (about 10 s on the H100 machine, sixteen workers at once)
        # while this worker starts, collects and waits for its first pair (zygote.py).
        zygote.prestart()
        # Its pairs come one after another: a reference's process may serve the next problem
        # (reused_reference.py; ended at the session's finish by the evaluator plugin).
        reused_reference.allow()


def write_manifest(path: Path, pairs: list[Pair]) -> None:
    """Absolute paths: the run reads them from its own directory, not the caller's."""
    rows = [{"problem": str(p.problem.resolve()), "candidate": str(p.candidate.resolve()), "sample": p.sample}
            for p in pairs]
    Path(path).write_text(json.dumps(rows, indent=1))


def read_manifest(path: Path) -> list[Pair]:
    return [Pair(Path(row["problem"]), Path(row["candidate"]), int(row["sample"]))
            for row in json.loads(Path(path).read_text())]


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    manifest = config.getoption("bench_pairs")
    if not manifest:
        return
    # The index keeps node ids unique (xdist schedules by node id) when two candidates of one
    # problem share a sample number, e.g. `x.py` and a workspace `x/`.
    for index, pair in enumerate(read_manifest(Path(manifest))):
        items.append(CandidateItem.from_parent(
            session, name=f"bench::{index:05d}::{pair.name}::{pair.candidate.name}", pair=pair))
