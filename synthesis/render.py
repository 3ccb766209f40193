"""Writes a chain of bound operators as a KernelBench-format problem file."""

from __future__ import annotations

from .recipes import BoundOp, ConfigValue, ParamValue

_SHORT = (("torch.nn.functional.", "F."), ("torch.nn.", "nn."))
BATCH_VARIABLE = "batch_size"  # the knob the workload filter turns


class _Names:
    """Local names for imported library objects, aliased when two share a name."""

    def __init__(self):
        self.lines: list[str] = []
        self.by_target: dict[str, str] = {}

    def __call__(self, target: str) -> str:
        for prefix, short in _SHORT:
            if target.startswith(prefix):
                return short + target[len(prefix):]
        if target.startswith("torch."):
            return target
        if target not in self.by_target:
            module, name = target.rsplit(".", 1)
            local = name
            taken = set(self.by_target.values())
            suffix = 2
            while local in taken:
                local, suffix = f"{name}_{suffix}", suffix + 1
            alias = f" as {local}" if local != name else ""
            self.lines.append(f"from {module} import {name}{alias}")
            self.by_target[target] = local
        return self.by_target[target]


def describe(chain: list[BoundOp]) -> str:
    return " -> ".join(bound.spec.name for bound in chain)


def render_task(chain: list[BoundOp], input_shape: tuple[int, ...], dtype: str = "float32",
                title: str = "") -> str:
    names = _Names()
    init_params: list[tuple[str, object]] = []
    init_lines: list[str] = []
    forward_lines: list[str] = []
    for index, bound in enumerate(chain, 1):
        spec = bound.spec
        select = f"[{spec.output_index}]" if spec.output_index is not None else ""
        if spec.kind == "module":
            arguments = []
            for name, value in bound.ctor.items():
                if isinstance(value, ConfigValue):
                    fields = []
                    for field_name, field_value in value.fields:
                        init_params.append((f"op{index}_{field_name}", field_value))
                        fields.append(f"{field_name}=op{index}_{field_name}")
                    arguments.append(f"{name}={names(value.target)}({', '.join(fields)})")
                else:
                    init_params.append((f"op{index}_{name}", value))
                    arguments.append(f"{name}=op{index}_{name}")
            init_lines.append(f"self.op{index} = {names(spec.target)}({', '.join(arguments)})")
            forward_lines.append(f"x = self.op{index}(x){select}")
            continue
        param_count = 0

        def literal(value, index=index):
            nonlocal param_count
            if isinstance(value, ParamValue):
                param_count += 1
                attribute = f"op{index}_weight{param_count}"
                init_lines.append(f"self.{attribute} = nn.Parameter(torch.randn({value.shape!r}))")
                return f"self.{attribute}"
            return repr(value)

        arguments = ["x"] + [literal(v) for v in bound.call_args]
        arguments += [f"{name}={literal(v)}" for name, v in bound.call_kwargs.items()]
        forward_lines.append(f"x = {names(spec.target)}({', '.join(arguments)}){select}")
    if dtype != "float32":
        init_lines.append(f"self.to(torch.{dtype})")

    dims = [BATCH_VARIABLE] + [f"dim{i}" for i in range(1, len(input_shape))]
    dtype_argument = f", dtype=torch.{dtype}" if dtype != "float32" else ""
    signature = ", ".join(["self"] + [name for name, _ in init_params])
    body = "\n".join(f"        {line}" for line in ["super().__init__()", *init_lines])
    forward = "\n".join(f"        {line}" for line in [*forward_lines, "return x"])
    imports = "\n".join(["import torch", "import torch.nn as nn", "import torch.nn.functional as F", *names.lines])
    constants = "\n".join(f"{name} = {size}" for name, size in zip(dims, input_shape, strict=True))
    return f'''"""{title or 'Synthesized task'}: {describe(chain)}."""

{imports}


class Model(nn.Module):
    """{describe(chain)}"""

    def __init__({signature}):
{body}

    def forward(self, x):
{forward}


{constants}


def get_inputs():
    return [torch.randn({", ".join(dims)}{dtype_argument})]


def get_init_inputs():
    return [{", ".join(repr(value) for _, value in init_params)}]
'''
