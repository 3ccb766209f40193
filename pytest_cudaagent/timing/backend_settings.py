"""Process-wide backend settings (TF32, float32 matmul precision, cuDNN benchmark, deterministic
algorithms): read them, set them, and say what differs between two states.

The candidate and the baselines are timed under the same settings (README, "Backend settings"):
the run's preset, or what the candidate switched to. Settings are read through PyTorch's
per-backend `fp32_precision` attributes where this torch has them: the legacy getters
(`allow_tf32`, `get_float32_matmul_precision`) raise once code has mixed the legacy and new APIs,
and a candidate may do exactly that.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass

from ..core.config import BACKEND_PRESETS

# The legacy switches, the names users know; PyTorch keeps them consistent with each other
# (float32_matmul_precision "highest" means matmul allow_tf32 off). Set through
# set_float32_matmul_precision and cudnn.allow_tf32, which also set the per-backend values below.
_LEGACY_PRECISION_KNOBS = ("cuda.matmul.allow_tf32", "float32_matmul_precision", "cudnn.allow_tf32")
# Torch 2.9 and later: per-backend values ("ieee", "tf32", "bf16"; "none" inherits the parent's),
# set by name, parents before children. Once code sets one of these, the legacy getters raise
# ("mixed" below) and only these say what is in force.
_PRECISION_KNOBS = (
    "fp32_precision",
    "cuda.matmul.fp32_precision",
    "cudnn.fp32_precision",
    "cudnn.conv.fp32_precision",
    "cudnn.rnn.fp32_precision",
    "mkldnn.matmul.fp32_precision",  # the CPU's matmuls: set_float32_matmul_precision sets it too
)
_FLAG_KNOBS = ("cudnn.benchmark", "cudnn.deterministic")
# Read through functions, set together by torch.use_deterministic_algorithms.
_DETERMINISTIC_KNOBS = ("deterministic_algorithms", "deterministic_warn_only")
MIXED = "mixed"  # a legacy getter that raised: legacy and new APIs were mixed
# fp32_precision values that compute fp32 with fewer mantissa bits than fp32 itself.
_LOWER_PRECISIONS = ("tf32", "bf16")


@dataclass(frozen=True)
class BackendSettings:
    """Knob name ("cudnn.benchmark", "cuda.matmul.fp32_precision", ...) -> value."""

    values: dict

    def to_dict(self) -> dict:
        return dict(self.values)

    @classmethod
    def from_dict(cls, data: dict) -> BackendSettings:
        return cls(dict(data))

    def legacy_readable(self) -> bool:
        return all(self.values.get(name) != MIXED for name in _LEGACY_PRECISION_KNOBS)


@functools.cache
def _has_precision_api() -> bool:
    import torch

    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _knobs() -> tuple[str, ...]:
    precision = _PRECISION_KNOBS if _has_precision_api() else ()
    return _LEGACY_PRECISION_KNOBS + precision + _FLAG_KNOBS + _DETERMINISTIC_KNOBS


def _owner(name: str):
    import torch

    owner = torch.backends
    for part in name.split(".")[:-1]:
        owner = getattr(owner, part)
    return owner, name.split(".")[-1]


def _read(name: str):
    import torch

    readers = {
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled,
    }
    owner, attribute = _owner(name)
    try:
        return readers[name]() if name in readers else getattr(owner, attribute)
    except RuntimeError:  # a legacy getter after the new API was used
        return MIXED


def capture() -> BackendSettings:
    """The settings in force in this process now."""
    return BackendSettings({name: _read(name) for name in _knobs()})


def _set(name: str, value) -> None:
    owner, attribute = _owner(name)
    setattr(owner, attribute, value)


def apply(settings: BackendSettings) -> list[str]:
    """Set every knob that differs from `settings` (nothing when none does, so a fresh process's
    own defaults leave it exactly as PyTorch made it). Returns what could not be reached, as
    `diff` lines (empty: all of it): a state reached by mixing the legacy and new APIs may not be
    reproducible through either."""
    import torch

    wanted, current = settings.values, capture().values
    if settings.legacy_readable():
        # Through the legacy switches, as users and published solutions set them, so the legacy
        # getters (which torch.compile reads) keep working.
        # allow_tf32 sets CUDA's matmuls only; set_float32_matmul_precision the CPU's too.
        if current.get("cuda.matmul.allow_tf32") != wanted["cuda.matmul.allow_tf32"]:
            torch.backends.cuda.matmul.allow_tf32 = wanted["cuda.matmul.allow_tf32"]
        if any(_read(name) != wanted.get(name) for name in ("float32_matmul_precision", "mkldnn.matmul.fp32_precision")
               if name in wanted):
            torch.set_float32_matmul_precision(wanted["float32_matmul_precision"])
        if current.get("cudnn.allow_tf32") != wanted["cudnn.allow_tf32"]:
            torch.backends.cudnn.allow_tf32 = wanted["cudnn.allow_tf32"]
    else:
        for name in _PRECISION_KNOBS:
            if name in wanted and current.get(name) != wanted[name]:
                _set(name, wanted[name])
    for name in _FLAG_KNOBS:
        if current.get(name) != wanted[name]:
            _set(name, wanted[name])
    deterministic = (wanted["deterministic_algorithms"], wanted["deterministic_warn_only"])
    if deterministic != (current.get("deterministic_algorithms"), current.get("deterministic_warn_only")):
        if deterministic[0]:
            # Deterministic algorithms refuse cuBLAS without it; a candidate that turned them on
            # set it in its own process, and the baselines copying its settings need it too
            # (PyTorch's documented value).
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
    return diff(settings, capture())


@contextlib.contextmanager
def applied(settings: BackendSettings):
    """`settings` in force inside the block (yields what could not be reached), the earlier
    ones restored after it."""
    before = capture()
    unreached = apply(settings)
    try:
        yield unreached
    finally:
        apply(before)


def for_preset(preset: str, defaults: BackendSettings) -> BackendSettings:
    """A preset's settings, from `defaults` (a fresh process's, captured, never hard-coded):
    pytorch-default is them as they are; strict-fp32 is what PyTorch's own switches make of them
    with TF32 off everywhere (cudnn.allow_tf32 False, float32 matmul precision "highest"). Sets
    them for a moment in this process to read the per-backend values they imply."""
    if preset not in BACKEND_PRESETS:
        raise ValueError(f"unknown backend preset {preset!r}; use one of {list(BACKEND_PRESETS)}")
    if preset == "pytorch-default":
        return defaults
    strict = {**defaults.values, "float32_matmul_precision": "highest", "cudnn.allow_tf32": False,
              "cuda.matmul.allow_tf32": False}
    with applied(BackendSettings(strict)):
        return capture()


def diff(before: BackendSettings, after: BackendSettings) -> list[str]:
    """"cudnn.benchmark: False -> True" for every knob whose value differs."""
    names = list(before.values) + [name for name in after.values if name not in before.values]
    return [f"{name}: {before.values.get(name)} -> {after.values.get(name)}" for name in names
            if before.values.get(name) != after.values.get(name)]


def _effective(values: dict, name: str):
    """A precision knob's value in force: "none" inherits from the nearest captured parent."""
    parts = name.split(".")[:-1]
    value = values.get(name)
    while value == "none" and parts:
        parts = parts[:-1]
        parent = ".".join([*parts, "fp32_precision"])
        value = values.get(parent, "none")
    return value


def lower_precision_signs(configured: BackendSettings, current: BackendSettings) -> list[str]:
    """Precision knobs at TF32 (or bf16) now that the run's settings had at full fp32: what the
    candidate turned on beyond the preset. What the preset itself allows is not the candidate's
    doing (under pytorch-default cuDNN's TF32 is on for the eager baseline too)."""
    signs = []
    for name in _precision_names(current):
        if name.endswith("fp32_precision"):
            now, was = _effective(current.values, name), _effective(configured.values, name)
            lowered = now in _LOWER_PRECISIONS and was not in _LOWER_PRECISIONS
        else:
            now, was = current.values[name], configured.values.get(name)
            lowered = now is True and was is not True
        if lowered:
            signs.append(f"TF32/bf16 enabled beyond the run's settings (torch.backends.{name}: {was} -> {now})")
    return signs


def allows_tf32(settings: BackendSettings) -> bool:
    """Whether the run's own settings let some library (cuDNN, cuBLAS) pick TF32 kernels."""
    return any(_effective(settings.values, name) == "tf32" if name.endswith("fp32_precision")
               else settings.values[name] is True for name in _precision_names(settings))


def _precision_names(settings: BackendSettings) -> list[str]:
    """The per-backend values where this torch has them (they never read "mixed"), else the
    legacy allow_tf32 switches."""
    names = [name for name in settings.values if name.endswith("fp32_precision")]
    return names or [name for name in settings.values if name.endswith("allow_tf32")]


def reference_settings(configured: BackendSettings) -> BackendSettings:
    """The reference computes expected outputs at full fp32 whatever the run's settings: the
    truth a TF32 candidate is checked against (README, "Backend settings")."""
    return for_preset("strict-fp32", configured)
