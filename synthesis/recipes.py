"""Turns an operator's recipes into concrete arguments for one input shape, and builds the
operator as a runnable module (for trial runs and for shape propagation on the meta device)."""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from .catalogue import OperatorSpec, Recipe


class NotApplicable(ValueError):
    """The recipe has no valid value for this input shape (e.g. no divisor fits)."""


@dataclass(frozen=True)
class ParamValue:
    """A learned parameter the generated Model owns, passed to a function operator."""

    shape: tuple[int, ...]


@dataclass(frozen=True)
class ConfigValue:
    """A transformers config object built from a few fields (the rest keep their defaults)."""

    target: str
    fields: tuple[tuple[str, Any], ...]


def import_target(target: str) -> Any:
    """`torch.nn.Conv2d` -> the class; tries the longest importable module prefix."""
    parts = target.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(f"cannot import {target}")


def _dim_size(shape: tuple[int, ...], dim: int) -> int:
    if len(shape) < 2 or dim == 0 or dim == -len(shape):
        # Binding the batch dimension would make the constructor depend on the batch size,
        # which the workload filter scales freely.
        raise NotApplicable(f"dimension {dim} of a rank-{len(shape)} input is the batch")
    return shape[dim]


def resolve(recipe: Recipe, shape: tuple[int, ...], rng: random.Random) -> Any:
    if "from_dim" in recipe:
        return _dim_size(shape, recipe["from_dim"])
    if "from_dim_tuple" in recipe:
        return (_dim_size(shape, recipe["from_dim_tuple"]),)
    if "divisor_of_dim" in recipe:
        size = _dim_size(shape, recipe["divisor_of_dim"])
        fitting = [c for c in recipe["choice"] if size % c == 0]
        if not fitting:
            raise NotApplicable(f"none of {recipe['choice']} divides {size}")
        return rng.choice(fitting)
    if "choice" in recipe:
        return rng.choice(recipe["choice"])
    if "value" in recipe:
        value = recipe["value"]
        return tuple(value) if isinstance(value, list) else value
    if "param" in recipe:
        dim = -1 if recipe["param"] == "last" else 1
        return ParamValue((_dim_size(shape, dim),))
    if "config" in recipe:
        fields = tuple((name, resolve(sub, shape, rng)) for name, sub in recipe["fields"].items())
        return ConfigValue(recipe["config"], fields)
    raise ValueError(f"unknown recipe {recipe!r}")


@dataclass
class BoundOp:
    """One operator with concrete arguments for one input shape."""

    spec: OperatorSpec
    ctor: dict[str, Any] = field(default_factory=dict)
    call_args: list[Any] = field(default_factory=list)
    call_kwargs: dict[str, Any] = field(default_factory=dict)
    in_shape: tuple[int, ...] = ()
    out_shape: tuple[int, ...] = ()


def bind(spec: OperatorSpec, shape: tuple[int, ...], rng: random.Random) -> BoundOp:
    return BoundOp(
        spec,
        {name: resolve(recipe, shape, rng) for name, recipe in spec.ctor.items()},
        [resolve(recipe, shape, rng) for recipe in spec.call_args],
        {name: resolve(recipe, shape, rng) for name, recipe in spec.call_kwargs.items()},
        tuple(shape),
    )


def _concrete(value: Any) -> Any:
    if isinstance(value, ConfigValue):
        return import_target(value.target)(**dict(value.fields))
    return value


class AppliedOp(nn.Module):
    """The operator as a module: what a generated Model does for this one step."""

    def __init__(self, bound: BoundOp):
        super().__init__()
        self.bound = bound
        target = import_target(bound.spec.target)
        if bound.spec.kind == "module":
            self.op = target(**{name: _concrete(v) for name, v in bound.ctor.items()})
        else:
            self.function = target
        self.params = nn.ParameterList(
            [nn.Parameter(torch.randn(v.shape)) for v in _param_values(bound)]
        )

    def forward(self, x: torch.Tensor) -> Any:
        if self.bound.spec.kind == "module":
            out = self.op(x)
        else:
            params = iter(self.params)

            def arg(value):
                return next(params) if isinstance(value, ParamValue) else value

            args = [arg(v) for v in self.bound.call_args]
            kwargs = {name: arg(v) for name, v in self.bound.call_kwargs.items()}
            out = self.function(x, *args, **kwargs)
        if self.bound.spec.output_index is not None:
            out = out[self.bound.spec.output_index]
        return out


def _param_values(bound: BoundOp) -> list[ParamValue]:
    values = [*bound.call_args, *bound.call_kwargs.values()]
    return [v for v in values if isinstance(v, ParamValue)]


def propagate(bound: BoundOp, dtype: torch.dtype = torch.float32) -> tuple[int, ...]:
    """The output shape for `bound.in_shape`, found on the meta device: no memory, no compute."""
    with torch.device("meta"):
        module = AppliedOp(bound).to(dtype)
        out = module(torch.empty(bound.in_shape, dtype=dtype))
    if not isinstance(out, torch.Tensor):
        raise NotApplicable(f"{bound.spec.name} returned {type(out).__name__}, not a tensor")
    bound.out_shape = tuple(out.shape)
    return bound.out_shape
