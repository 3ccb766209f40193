"""Pairs candidate solutions with problems by name, several samples per problem (pass@k).

Recognised names, anywhere under the candidates directory (level subdirectories allowed):
- KernelBench's: `level_<L>_problem_<N>_sample_<K>_kernel.py` and `level_<L>_problem_<N>_sample_<K>.py`;
- by problem file stem: `<stem>.py` (sample 0) and `<stem>_sample_<K>.py`;
- CUDA-Agent workspace directories (holding `model_new.py`) named either way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cudaagent.core.files import WORKSPACE_MODEL_NEW
from pytest_cudaagent.records.pairing import Pair

from .kernelbench import _LEVEL_DIR, _SOLUTION_NAME, Problem

_STEM_SAMPLE = re.compile(r"(.+)_sample_(\d+)")


@dataclass
class Pairing:
    pairs: list[Pair]
    unmatched: list[Path] = field(default_factory=list)  # candidates no problem claimed


def candidate_entries(candidates_dir: Path) -> list[Path]:
    """Candidate `.py` files and workspace directories; other directories are searched."""
    entries = []
    for entry in sorted(Path(candidates_dir).iterdir()):
        if entry.name.startswith(("_", ".", "test_")):
            continue
        if entry.is_dir():
            entries += [entry] if (entry / WORKSPACE_MODEL_NEW).is_file() else candidate_entries(entry)
        elif entry.suffix == ".py":
            entries.append(entry)
    return entries


def _level_dir_of(entry: Path, root: Path) -> str | None:
    for part in entry.relative_to(root).parts[:-1]:
        match = _LEVEL_DIR.fullmatch(part)
        if match:
            return match.group(1)
    return None


def pair_solutions(problems: list[Problem], candidates_dir: str | Path) -> Pairing:
    candidates_dir = Path(candidates_dir)
    if not candidates_dir.is_dir():
        raise FileNotFoundError(f"{candidates_dir}: no such candidates directory")
    by_id = {(problem.level, problem.problem_id): problem for problem in problems if problem.problem_id is not None}
    by_stem: dict[str, list[Problem]] = {}
    for problem in problems:
        by_stem.setdefault(problem.path.stem, []).append(problem)
    order = {problem.path: index for index, problem in enumerate(problems)}

    pairs, unmatched = [], []
    for entry in candidate_entries(candidates_dir):
        name = entry.stem if entry.is_file() else entry.name
        kernelbench = _SOLUTION_NAME.fullmatch(name)
        if kernelbench:
            problem = by_id.get((kernelbench.group(1), int(kernelbench.group(2))))
            sample = int(kernelbench.group(3))
        else:
            problem, sample = _by_stem(name, by_stem, _level_dir_of(entry, candidates_dir))
        if problem is None:
            unmatched.append(entry)
        else:
            pairs.append(Pair(problem.path, entry, sample))
    pairs.sort(key=lambda pair: (order[pair.problem], pair.sample, pair.candidate.name))
    return Pairing(pairs, unmatched)


def _by_stem(name: str, by_stem: dict[str, list[Problem]], level: str | None) -> tuple[Problem | None, int]:
    matched = _STEM_SAMPLE.fullmatch(name)
    for stem, sample in ((name, 0), *([(matched.group(1), int(matched.group(2)))] if matched else [])):
        found = [p for p in by_stem.get(stem, []) if level is None or p.level == level]
        if len(found) == 1:
            return found[0], sample
    return None, 0
