"""Pairs problem files with candidates by name, for directory mode and batch runs.

A problem `problems/<stem>.py` pairs with, in the candidates directory: `<stem>.py`,
`<stem>_sample_<K>.py`, or workspace directories `<stem>/` and `<stem>_sample_<K>/`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .results_file import pair_key


@dataclass(frozen=True)
class Pair:
    problem: Path
    candidate: Path
    sample: int = 0

    @property
    def name(self) -> str:
        stem = self.problem.stem
        return f"{stem}[sample {self.sample}]" if self.sample else stem

    @property
    def key(self) -> str:
        """Identifies the pair in results files, for resuming."""
        return pair_key(self.problem, self.candidate)


def _sample_of(name: str, stem: str) -> int | None:
    if name == stem:
        return 0
    match = re.fullmatch(re.escape(stem) + r"_sample_(\d+)", name)
    return int(match.group(1)) if match else None


def problem_files(problems_dir: Path) -> list[Path]:
    return sorted(p for p in Path(problems_dir).glob("*.py") if not p.name.startswith(("_", "test_")))


def pair_directory(problems_dir: Path, candidates_dir: Path) -> list[Pair]:
    problems_dir, candidates_dir = Path(problems_dir), Path(candidates_dir)
    if not problems_dir.is_dir():
        raise FileNotFoundError(f"{problems_dir}: no such problems directory")
    if not candidates_dir.is_dir():
        raise FileNotFoundError(f"{candidates_dir}: no such candidates directory")
    entries = sorted(candidates_dir.iterdir())
    pairs = []
    for problem in problem_files(problems_dir):
        for entry in entries:
            name = entry.stem if entry.suffix == ".py" else entry.name
            if entry.is_file() and entry.suffix != ".py":
                continue
            sample = _sample_of(name, problem.stem)
            if sample is not None:
                pairs.append(Pair(problem, entry, sample))
    return pairs
