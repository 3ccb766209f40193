"""Problem sets: a KernelBench clone (`KernelBench/level<L>/<id>_<Name>.py`), KernelBench's
published dataset files (parquet/JSON rows with the problem source), or a flat directory.

Problem files are read where the user keeps them; dataset rows are written out as files under a
directory the caller names (the run's output), never into this repository.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pytest_cudaagent.records.pairing import problem_files

EXAMPLES_PROBLEMS = Path(__file__).resolve().parent.parent / "examples" / "problems"
DATASET_SUFFIXES = (".parquet", ".json", ".jsonl")
_LEVEL_DIR = re.compile(r"level_?(\d+)")
_PROBLEM_FILE = re.compile(r"(\d+)_.+\.py")
_SOLUTION_NAME = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)(?:_kernel)?")


@dataclass(frozen=True)
class Problem:
    level: str  # "1", "2", ... for KernelBench; "examples" or "custom" otherwise
    problem_id: int | None  # KernelBench's number (the file name's prefix); None elsewhere
    path: Path

    @property
    def name(self) -> str:
        """The file name, as KernelBench's baseline files key problems."""
        return self.path.name

    @property
    def level_key(self) -> str:
        return f"level{self.level}" if self.level.isdigit() else self.level


def level_of(problem: str | Path, candidate: str | Path | None = None) -> str:
    """A result's level from its paths: a `level<N>/` directory above the problem, a
    `level_<L>_problem_` candidate name, the bundled examples, or "custom"."""
    problem = Path(problem)
    for part in reversed(problem.parent.parts):
        match = _LEVEL_DIR.fullmatch(part)
        if match:
            return match.group(1)
    if candidate is not None:
        match = _SOLUTION_NAME.search(Path(candidate).name)
        if match:
            return match.group(1)
    if problem.resolve().parent == EXAMPLES_PROBLEMS:
        return "examples"
    return "custom"


def level_label(level: str) -> str:
    return f"level{level}" if str(level).isdigit() else str(level)


def _kernelbench_root(path: Path) -> Path | None:
    """The directory holding level1/, level2/...: the clone's `KernelBench/` or PATH itself."""
    for root in (path / "KernelBench", path):
        if root.is_dir() and any(_LEVEL_DIR.fullmatch(p.name) for p in root.iterdir() if p.is_dir()):
            return root
    return None


def is_dataset(path: Path) -> bool:
    if path.is_file():
        return path.suffix in DATASET_SUFFIXES
    return path.is_dir() and _kernelbench_root(path) is None and any(
        p.suffix in DATASET_SUFFIXES for p in path.rglob("*"))


def load_tree(path: str | Path) -> list[Problem]:
    """Every problem of a KernelBench clone (or its `KernelBench/` directory)."""
    path = Path(path)
    root = _kernelbench_root(path) if path.is_dir() else None
    if root is None:
        raise FileNotFoundError(
            f"{path}: no KernelBench level directories (level1/, level2/, ...) here or in "
            f"{path / 'KernelBench'}; give the path of a KernelBench clone or of its dataset files")
    problems = []
    for level_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        match = _LEVEL_DIR.fullmatch(level_dir.name)
        if not match:
            continue
        for file in problem_files(level_dir):
            number = _PROBLEM_FILE.fullmatch(file.name)
            problems.append(Problem(match.group(1), int(number.group(1)) if number else None, file))
    return _ordered(problems)


def load_flat(directory: str | Path) -> list[Problem]:
    """A plain directory of problem files (the bundled examples, or the user's own)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such problems directory")
    return [Problem(level_of(file), None, file) for file in problem_files(directory)]


def _dataset_rows(path: Path) -> list[dict]:
    import pandas as pd

    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in DATASET_SUFFIXES)
    rows: list[dict] = []
    for file in files:
        if file.suffix == ".parquet":
            rows += pd.read_parquet(file).to_dict("records")
        elif file.suffix == ".jsonl":
            rows += [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
        else:
            data = json.loads(file.read_text())
            if isinstance(data, dict):  # {"level_1": [rows], ...} or {"rows": [...]}
                data = [row for value in data.values() if isinstance(value, list) for row in value]
            rows += data
    return rows


def load_dataset(path: str | Path, materialize_dir: str | Path) -> list[Problem]:
    """KernelBench's published rows (`code`, `level`, `problem_id`, `name`), each written to
    `materialize_dir/level<L>/<name>.py` so workers can import it and its level shows in the path."""
    path = Path(path)
    rows = _dataset_rows(path)
    if not rows:
        raise ValueError(f"{path}: no dataset rows found (parquet, JSON or JSONL with a 'code' column)")
    missing = {"code", "level"} - set(rows[0])
    if missing:
        raise ValueError(f"{path}: dataset rows lack {sorted(missing)}; KernelBench's rows have "
                         "code, level, problem_id and name")
    problems = []
    for row in rows:
        level = str(int(row["level"])) if str(row["level"]).isdigit() else str(row["level"])
        problem_id = int(row["problem_id"]) if row.get("problem_id") is not None else None
        name = str(row.get("name") or f"{problem_id}_problem")
        name = name if name.endswith(".py") else f"{name}.py"
        if problem_id is not None and not _PROBLEM_FILE.fullmatch(name):
            name = f"{problem_id}_{name}"
        file = Path(materialize_dir) / f"level{level}" / name
        file.parent.mkdir(parents=True, exist_ok=True)
        if not file.exists() or file.read_text() != row["code"]:
            file.write_text(row["code"])
        problems.append(Problem(level, problem_id, file))
    return _ordered(problems)


def load_kernelbench(path: str | Path, materialize_dir: str | Path) -> list[Problem]:
    """A clone or dataset files, whichever PATH is."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such KernelBench clone or dataset file")
    return load_dataset(path, materialize_dir) if is_dataset(path) else load_tree(path)


def select(problems: Iterable[Problem], levels: Iterable[str] = (), ids: Iterable[int] = (),
           name_pattern: str | None = None) -> list[Problem]:
    """Keep problems in any of `levels`, with any of `ids`, whose file name matches the glob
    `name_pattern` (case-insensitive; a plain word matches anywhere in the name)."""
    levels = {str(level).removeprefix("level") for level in levels}
    ids = set(ids)
    if name_pattern and not any(ch in name_pattern for ch in "*?["):
        name_pattern = f"*{name_pattern}*"
    return [problem for problem in problems
            if (not levels or problem.level in levels)
            and (not ids or problem.problem_id in ids)
            and (not name_pattern or fnmatch.fnmatch(problem.name.lower(), name_pattern.lower()))]


def _ordered(problems: list[Problem]) -> list[Problem]:
    def order(problem: Problem):
        return (int(problem.level) if problem.level.isdigit() else 10**6, problem.problem_id or 0, problem.name)

    return sorted(problems, key=order)
