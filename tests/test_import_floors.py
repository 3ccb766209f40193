"""The import graph as a test: every module of the four packages is parsed with `ast` (nothing is
imported), and an import that goes up a floor, or a circle between modules, fails. Imports inside
functions count too: a lazy import is still a dependency. `python -m tests.test_import_floors`
prints the graph."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The floors (docs/CONTRACTS.md, "Layout"): a package may import its own floor's packages only when
# listed in SIDEWAYS, and any package below it.
FLOORS = {"pytest_cudaagent": 0, "benchmark": 1, "policy": 1, "synthesis": 2}
# The trainer's xdist scorer runs a rollout batch through benchmark.batch, the same pytest-xdist
# path as `cudaagent bench` (issue #16); benchmark never imports policy.
SIDEWAYS: set[tuple[str, str]] = {("policy", "benchmark")}
# Measurement scripts are not installed; they may use any package, as a user would.
NOT_INSTALLED = ("benchmark.experiments",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for package in FLOORS for path in sorted((ROOT / package).rglob("*.py"))
            if "workspace_template" not in path.parts}


def _imported(node: ast.AST, name: str, is_package: bool) -> list[str]:
    """The modules one import statement names, as absolute dotted names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = name.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        stem = ".".join(base + ([node.module] if node.module else []))
    else:
        stem = node.module or ""
    # `from package import module` names a module; `from module import function` does not.
    return [stem] + [f"{stem}.{alias.name}" for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of the four packages it imports (anywhere in its body)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, path.name == "__init__.py"):
                if target in known and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def package_of(module: str) -> str:
    return module.split(".")[0]


def installed(module: str) -> bool:
    return not any(module == prefix or module.startswith(prefix + ".") for prefix in NOT_INSTALLED)


def package_graph(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> the module edges behind it, installed modules only."""
    edges = collections.defaultdict(list)
    for source, targets in graph.items():
        for target in targets:
            if installed(source) and package_of(source) != package_of(target):
                edges[package_of(source), package_of(target)].append(f"{source} -> {target}")
    return dict(edges)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _edge_is_parent_package(source: str, target: str) -> bool:
    # `from . import x` inside a package names the package's __init__; not a real dependency
    # circle when __init__ only re-exports.
    return source.startswith(target + ".")


def test_no_import_goes_up_a_floor():
    upward = {pair: edges for pair, edges in package_graph(import_graph()).items()
              if FLOORS[pair[1]] > FLOORS[pair[0]]
              or (FLOORS[pair[1]] == FLOORS[pair[0]] and pair not in SIDEWAYS)}
    assert not upward, f"imports that go up or sideways a floor: {upward}"


def test_no_two_modules_import_each_other():
    graph = {source: {t for t in targets if not _edge_is_parent_package(source, t)}
             for source, targets in import_graph().items()}
    assert not cycles(graph), f"import circles: {cycles(graph)}"


def test_the_graph_sees_known_edges():
    """The parser finds imports of every form (absolute, relative, lazy), so a clean result means
    something."""
    graph = import_graph()
    assert "pytest_cudaagent.config" in graph["benchmark.cli"]            # from x.y import z
    assert "benchmark.kernelbench" in graph["benchmark.commands"]         # from .kernelbench import
    assert "benchmark.commands" in graph["benchmark.cli"]                 # from . import commands, lazy
    assert "benchmark.kernelbench" in graph["synthesis.contamination"]    # lazy, inside a function


def main() -> None:
    graph = import_graph()
    print("package imports (installed modules):")
    for (source, target), edges in sorted(package_graph(graph).items()):
        print(f"  {source} -> {target}  ({len(edges)} edges, e.g. {edges[0]})")
    print("module circles:", cycles({s: {t for t in ts if not _edge_is_parent_package(s, t)}
                                    for s, ts in graph.items()}) or "none")


if __name__ == "__main__":
    main()
