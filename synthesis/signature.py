"""Operator names normalised across spellings (nn.GELU, F.gelu, torch.nn.functional.gelu and
`x.gelu()` are one operator), the operator sequence of any problem file read from its source,
and the stochastic operators that no task may use."""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Spellings of one operation. GEMM and convolution carry the weight of a task, so every way of
# writing a matrix product is one family: a KernelBench `nn.Linear` problem and a synthesized
# `torch.matmul` with a weight are the same kernel to write.
ALIASES = {
    "linear": "gemm", "matmul": "gemm", "mm": "gemm", "addmm": "gemm", "bmm": "gemm",
    "baddbmm": "gemm", "einsum": "gemm", "swish": "silu", "absolute": "abs", "arccos": "acos",
    "arcsin": "asin", "arctan": "atan", "arccosh": "acosh", "arcsinh": "asinh",
    "arctanh": "atanh", "multiply": "mul", "divide": "div", "truedivide": "div",
    "subtract": "sub", "negative": "neg", "clip": "clamp", "greater": "gt",
    "greaterequal": "ge", "less": "lt", "lessequal": "le", "notequal": "ne",
    "swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim",
    "concatenate": "cat", "concat": "cat", "iadd": "add", "imul": "mul", "isub": "sub",
    "itruediv": "div", "truediv": "div", "floordiv": "floordivide", "matmult": "gemm",
    "pow": "pow", "identity": "identity",
}
# Suffixes of library class names that say what the operator is (LlamaRMSNorm -> rmsnorm).
_CLASS_FAMILIES = (
    "rmsnorm", "layernorm", "groupnorm", "batchnorm", "instancenorm", "mlp", "feedforward",
    "rotaryembedding", "attention", "glu",
)

# Operators that draw random numbers when called: a task using one has no fixed answer.
STOCHASTIC_EXACT = {
    "bernoulli", "multinomial", "normal", "poisson", "rand", "randn", "randint", "randperm",
    "randlike", "randnlike", "randintlike", "rrelu", "gumbelsoftmax", "uniform", "exponential",
    "geometric", "cauchy", "lognormal", "samplefree", "standardgamma", "binomial",
}
STOCHASTIC_SUBSTRINGS = ("dropout", "fractionalmaxpool")


def normalise(name: str) -> str:
    """`torch.nn.functional.leaky_relu` -> `leakyrelu`; `nn.SiLU` -> `silu`; aliases merged."""
    base = name.split(".")[-1].lower().replace("_", "")
    for suffix in ("activation", "function"):
        if base.endswith(suffix) and base != suffix:
            base = base[: -len(suffix)]
    if base.startswith("lazy"):  # nn.LazyLinear is nn.Linear with its input size inferred
        base = base[4:]
    for family in _CLASS_FAMILIES:
        if base.endswith(family):
            base = family
            break
    return ALIASES.get(base, base)


def is_stochastic(name: str) -> bool:
    family = normalise(name)
    raw = name.split(".")[-1].lower().replace("_", "")
    return (
        family in STOCHASTIC_EXACT
        or raw in STOCHASTIC_EXACT
        or any(part in raw for part in STOCHASTIC_SUBSTRINGS)
    )


_BINOPS = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "gemm",
    ast.Pow: "pow", ast.FloorDiv: "floordivide", ast.Mod: "remainder",
}
# Calls that move data into place without computing: they do not make two tasks different.
_NOT_OPERATORS = {
    "super", "init", "forward", "contiguous", "view", "reshape", "size", "dim", "float",
    "to", "len", "range", "tuple", "list", "int", "isinstance", "append", "expand",
    "expandas", "viewas", "unsqueeze", "squeeze", "getattr", "type", "item", "numel",
    "parameter", "zeros", "ones", "empty", "tensor", "print", "max_", "min_",
}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return None


@dataclass
class ProblemSignature:
    operators: list[str]  # normalised, in the order forward() calls them
    input_ranks: list[int]  # ranks of get_inputs() tensors, where the source says them

    @property
    def key(self) -> str:
        return "-".join(self.operators) + "|" + ",".join(map(str, self.input_ranks))


def _model_class(tree: ast.Module) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return node
    return None


def _attribute_modules(init: ast.FunctionDef) -> dict[str, str]:
    """`self.conv = nn.Conv2d(...)` -> {"conv": "nn.Conv2d"} (also through nn.Sequential)."""
    found: dict[str, str] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = _dotted(node.value.func)
            for target in node.targets:
                if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == "self" and called):
                    if called.split(".")[-1] == "Sequential":
                        inner = [_dotted(arg.func) for arg in node.value.args if isinstance(arg, ast.Call)]
                        found[target.attr] = "+".join(name for name in inner if name)
                    else:
                        found[target.attr] = called
    return found


def _forward_operators(method: ast.FunctionDef, modules: dict[str, str]) -> list[str]:
    """Operators in the order they run: post-order, so `relu(conv(x))` gives conv, relu."""
    operators: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            visit(child)
        if isinstance(node, ast.Call):
            called = _dotted(node.func) or ""
            parts = called.split(".")
            if len(parts) == 2 and parts[0] == "self" and parts[1] in modules:
                operators.extend(normalise(name) for name in modules[parts[1]].split("+"))
                return
            if not parts[-1]:
                return
            operators.append(normalise(parts[-1]))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            operators.append(_BINOPS.get(type(node.op), type(node.op).__name__.lower()))
        elif (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
              and not isinstance(node.operand, ast.Constant)):  # -1 is a literal, not an operator
            operators.append("neg")

    for statement in method.body:
        visit(statement)
    return [op for op in operators if op not in _NOT_OPERATORS]


def _input_ranks(tree: ast.Module) -> list[int]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_inputs":
            ranks = []
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and (_dotted(call.func) or "").split(".")[-1] in (
                    "randn", "rand", "randint", "ones", "zeros", "empty", "randn_like"):
                    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
                    if len(positional) == 1 and isinstance(positional[0], (ast.Tuple, ast.List)):
                        ranks.append(len(positional[0].elts))
                    else:
                        ranks.append(len(positional))
            return ranks
    return []


def problem_signature(source: str) -> ProblemSignature:
    """Read a KernelBench-format problem without running it."""
    tree = ast.parse(source)
    model = _model_class(tree)
    if model is None:
        return ProblemSignature([], _input_ranks(tree))
    methods = {node.name: node for node in model.body if isinstance(node, ast.FunctionDef)}
    modules = _attribute_modules(methods["__init__"]) if "__init__" in methods else {}
    operators: list[str] = []
    if "forward" in methods:
        operators = _forward_operators(methods["forward"], modules)
    return ProblemSignature(operators, _input_ranks(tree))


def stochastic_calls(source: str) -> list[str]:
    """Stochastic operators that the Model runs (its methods other than the constructor body's
    weight initialisation, plus any stochastic module it owns)."""
    tree = ast.parse(source)
    model = _model_class(tree)
    if model is None:
        return []
    found = []
    for method in model.body:
        if not isinstance(method, ast.FunctionDef):
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Call):
                called = _dotted(node.func) or ""
                # Random weights at construction are fine (the evaluator shares them); random
                # modules built there, like nn.Dropout, are not.
                if method.name == "__init__" and not called.split(".")[-1][:1].isupper():
                    continue
                if called and is_stochastic(called):
                    found.append(called)
    return sorted(set(found))
