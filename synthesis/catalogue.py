"""The seed-operator catalogue: what the crawl found, how to build and call each operator, and
the crawl log saying why every operator looked at was kept or dropped."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cudaagent.records.state_files import write_atomically

# Recipes are small JSON dicts, so the catalogue is a plain file a person can read and edit:
#   {"from_dim": d}          the size of input dimension d (d is 1 or -1, never the batch)
#   {"from_dim_tuple": d}    the same, as a one-element tuple (normalized_shape)
#   {"choice": [a, b, ...]}  one of these, drawn by the composer's seeded RNG
#   {"divisor_of_dim": d, "choice": [...]}  a choice that divides input dimension d
#   {"value": v}             a literal
#   {"param": "last"|"channel"}  a learned nn.Parameter of shape (size of dim -1 or dim 1,)
#   {"config": "module.Class", "fields": {name: recipe}}  a transformers config object
Recipe = dict


@dataclass
class OperatorSpec:
    name: str  # unique id, e.g. "nn.Conv2d", "F.gelu", "torch.cumsum", "hf.LlamaRMSNorm"
    source: str  # "torch.nn", "torch.nn.functional", "torch", "torch.special", "transformers"
    kind: str  # "module" (constructed in __init__) or "function" (called in forward)
    target: str  # importable dotted path of the class or function
    family: str  # normalised operator name, shared by aliases (nn.GELU and F.gelu: "gelu")
    ctor: dict[str, Recipe] = field(default_factory=dict)  # constructor keyword arguments
    call_args: list[Recipe] = field(default_factory=list)  # positional arguments after the input
    call_kwargs: dict[str, Recipe] = field(default_factory=dict)
    output_index: int | None = None  # take this element when the operator returns a tuple
    ranks: list[int] = field(default_factory=list)  # input ranks it ran on
    dtypes: list[str] = field(default_factory=list)  # input dtypes it ran on
    shape_rule: str = "same"  # "same", "last_dim", "channel", "reduce", "expand" or "general"
    category: str = "compute"  # "compute", or "layout" (output is a permutation of the input)
    has_weights: bool = False  # owns learned parameters (GEMM, convolution, norm affine)
    imports: list[str] = field(default_factory=list)  # modules the generated source imports

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> OperatorSpec:
        return cls(**data)


@dataclass
class CrawlRecord:
    name: str
    source: str
    kept: bool
    reason: str  # "kept" or why it was dropped, e.g. "stochastic", "needs 2 tensor inputs"
    detail: str = ""


@dataclass
class Catalogue:
    operators: list[OperatorSpec]
    log: list[CrawlRecord]
    versions: dict[str, str] = field(default_factory=dict)

    def by_name(self) -> dict[str, OperatorSpec]:
        return {op.name: op for op in self.operators}

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "versions": self.versions,
            "operators": [op.to_dict() for op in self.operators],
            "log": [dataclasses.asdict(record) for record in self.log],
        }
        write_atomically(path, json.dumps(data, indent=1))  # a killed crawl leaves no half catalogue

    def save_log(self, path: str | Path) -> None:
        """The crawl log as a table: one row per operator looked at."""
        import pandas as pd

        frame = pd.DataFrame([dataclasses.asdict(record) for record in self.log])
        Path(path).write_text(frame.to_csv(index=False))

    @classmethod
    def load(cls, path: str | Path) -> Catalogue:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: no operator catalogue; write one with `cudaagent synth crawl --out {path}`"
            )
        data = json.loads(path.read_text())
        return cls(
            [OperatorSpec.from_dict(op) for op in data["operators"]],
            [CrawlRecord(**record) for record in data["log"]],
            data.get("versions", {}),
        )
