"""The import graph as a test: every module of the five packages is parsed with `ast` (nothing is
imported), and an import that goes up a floor (between packages, or between the parts of
pytest_cudaagent), or a circle between modules, fails. Imports inside
functions count too: a lazy import is still a dependency. `python -m tests.test_import_floors`
prints the graph."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The floors (docs/CONTRACTS.md, "Layout"): a package imports only packages on lower floors. The
# trainer's xdist scorer (policy) runs a rollout batch through benchmark.batch, the same
# pytest-xdist path as `cudaagent bench` (issue #16), so policy sits above benchmark; synthesis
# uses both (benchmark.kernelbench, policy.engines). The measurement scripts (experiments/, not
# installed) use any package, as a user would, and nothing imports them.
FLOORS = {"pytest_cudaagent": 0, "benchmark": 1, "policy": 2, "synthesis": 3, "experiments": 4}

# The parts of pytest_cudaagent and their floors (docs/CONTRACTS.md, "Layout"): a module imports
# modules of its own part and of lower floors only; parts on one floor do not import each other.
# The top (the package's __init__, the CLI, the plugin, the evaluation) may import every part.
PARTS = {"system": 0, "core": 1, "rules": 2, "timing": 3, "builds": 4, "records": 4, "resources": 4,
         "workers": 5}
TOP = "top"
TOP_MODULES = {"pytest_cudaagent", "pytest_cudaagent.cli", "pytest_cudaagent.plugin", "pytest_cudaagent.options",
               "pytest_cudaagent.terminal", "pytest_cudaagent.evaluation"}


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
    """module -> the modules of the five packages it imports (anywhere in its body)."""
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


def package_graph(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> the module edges behind it."""
    edges = collections.defaultdict(list)
    for source, targets in graph.items():
        for target in targets:
            if package_of(source) != package_of(target):
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
              if FLOORS[pair[1]] >= FLOORS[pair[0]]}
    assert not upward, f"imports that go up or sideways a floor: {upward}"


def test_no_two_modules_import_each_other():
    graph = {source: {t for t in targets if not _edge_is_parent_package(source, t)}
             for source, targets in import_graph().items()}
    assert not cycles(graph), f"import circles: {cycles(graph)}"


def part_of(module: str) -> str:
    """`pytest_cudaagent.timing.timer` -> "timing"; a module at the package's top -> "top"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PARTS else TOP


def part_floor(part: str) -> int:
    return PARTS.get(part, max(PARTS.values()) + 1)


def part_graph(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importer part, imported part) -> the module edges behind it, inside pytest_cudaagent."""
    edges = collections.defaultdict(list)
    for source, targets in graph.items():
        for target in targets:
            if package_of(source) == package_of(target) == "pytest_cudaagent" \
                    and part_of(source) != part_of(target):
                edges[part_of(source), part_of(target)].append(f"{source} -> {target}")
    return dict(edges)


def test_every_evaluator_module_is_in_a_part():
    """A new module goes into the part its role names (or is one of the few at the top)."""
    loose = [name for name in modules() if package_of(name) == "pytest_cudaagent"
             and part_of(name) == TOP and name not in TOP_MODULES]
    assert not loose, f"modules of pytest_cudaagent in no part: {loose}"
    assert {path.name for path in (ROOT / "pytest_cudaagent").iterdir()
            if path.is_dir() and (path / "__init__.py").exists()} == set(PARTS)


def test_every_part_says_what_lives_there_and_imports_nothing():
    """Each part's __init__ is a docstring only: importing `pytest_cudaagent.core.result` loads no
    other module of the part (nor torch)."""
    for part in PARTS:
        tree = ast.parse((ROOT / "pytest_cudaagent" / part / "__init__.py").read_text())
        assert ast.get_docstring(tree), f"pytest_cudaagent/{part}/__init__.py has no docstring"
        assert len(tree.body) == 1, f"pytest_cudaagent/{part}/__init__.py does more than say what lives there"


def test_no_part_of_the_evaluator_imports_upward_or_sideways():
    upward = {pair: edges for pair, edges in part_graph(import_graph()).items()
              if part_floor(pair[1]) >= part_floor(pair[0])}
    assert not upward, f"imports between parts of pytest_cudaagent that go up or sideways: {upward}"


def test_no_two_parts_of_the_evaluator_import_each_other():
    parts = collections.defaultdict(set)
    for source, target in part_graph(import_graph()):
        parts[source].add(target)
    assert not cycles(dict(parts)), f"circles between parts: {cycles(dict(parts))}"


def test_the_graph_sees_known_edges():
    """The parser finds imports of every form (absolute, relative, lazy), so a clean result means
    something."""
    graph = import_graph()
    assert "pytest_cudaagent.core.config" in graph["benchmark.cli"]            # from x.y import z
    assert "benchmark.kernelbench" in graph["benchmark.commands"]         # from .kernelbench import
    assert "benchmark.commands" in graph["benchmark.cli"]                 # from . import commands, lazy
    assert "benchmark.kernelbench" in graph["synthesis.contamination"]    # lazy, inside a function
    assert "pytest_cudaagent.timing.host_quiet" in graph["pytest_cudaagent.workers.channel"]  # from ..x import y
    assert "pytest_cudaagent.core.config" in graph["pytest_cudaagent"]    # from .x.y import z


def main() -> None:
    graph = import_graph()
    print("package imports:")
    for (source, target), edges in sorted(package_graph(graph).items()):
        print(f"  {source} -> {target}  ({len(edges)} edges, e.g. {edges[0]})")
    print("parts of pytest_cudaagent (floor: part -> parts it imports):")
    imported = collections.defaultdict(set)
    for source, target in part_graph(graph):
        imported[source].add(target)
    for part in sorted([*PARTS, TOP], key=lambda p: (part_floor(p), p)):
        print(f"  {part_floor(part)}: {part} -> {', '.join(sorted(imported[part], key=part_floor)) or '-'}")
    print("module circles:", cycles({s: {t for t in ts if not _edge_is_parent_package(s, t)}
                                    for s, ts in graph.items()}) or "none")


if __name__ == "__main__":
    main()
