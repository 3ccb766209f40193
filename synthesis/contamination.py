"""Contamination and duplicate control by normalised operator sequence and input-rank signature:
a task that computes what a KernelBench problem computes (the same operators in the same order,
or nearly so on inputs of the same ranks) is dropped, and so is a second task with the signature
of one already made."""

from __future__ import annotations

import difflib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .signature import ProblemSignature, problem_signature


@dataclass
class Reference:
    name: str
    signature: ProblemSignature


@dataclass
class ContaminationIndex:
    # Two sequences this similar (difflib ratio) on the same input ranks are near-duplicates:
    # 0.8 means four of five operators shared in order.
    similarity: float = 0.8
    references: list[Reference] = field(default_factory=list)
    seen_keys: dict[str, str] = field(default_factory=dict)  # synthesized signature -> task id
    _exact: dict[tuple[str, ...], str] = field(default_factory=dict)

    def add_reference(self, name: str, source: str) -> None:
        try:
            signature = problem_signature(source)
        except SyntaxError:
            return
        if signature.operators:
            self.references.append(Reference(name, signature))
            self._exact.setdefault(tuple(signature.operators), name)

    def contaminated_by(self, signature: ProblemSignature) -> str | None:
        """The KernelBench problem this task nearly duplicates, if any."""
        operators = tuple(signature.operators)
        if operators in self._exact:
            return self._exact[operators]
        for reference in self.references:
            if reference.signature.input_ranks != signature.input_ranks:
                continue
            ratio = difflib.SequenceMatcher(None, operators, reference.signature.operators).ratio()
            if ratio >= self.similarity:
                return reference.name
        return None

    def duplicate_of(self, task_id: str, signature: ProblemSignature) -> str | None:
        """The earlier task with this signature; registers this one when it is the first."""
        first = self.seen_keys.setdefault(signature.key, task_id)
        return None if first == task_id else first


def load_kernelbench_index(path: str | Path, similarity: float = 0.8) -> ContaminationIndex:
    """Read every KernelBench problem (a clone or its dataset files) without running it."""
    from benchmark.kernelbench import load_kernelbench

    index = ContaminationIndex(similarity)
    with tempfile.TemporaryDirectory(prefix="cudaagent-kb-") as materialized:
        problems = load_kernelbench(path, materialized)
        if not problems:
            raise FileNotFoundError(
                f"{path}: no KernelBench problems found; give a clone's KernelBench/ directory "
                "or its dataset files (.parquet, .json)"
            )
        for problem in problems:
            index.add_reference(f"level{problem.level}/{problem.name}", problem.path.read_text())
    return index
