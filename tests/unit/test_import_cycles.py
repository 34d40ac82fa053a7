"""Our modules import one way: no import cycle among node/ and coordinator_tools/.

Every import statement counts, wherever it stands: at the top of a module, inside a function, or under
`if TYPE_CHECKING:` (an import moved there still ties the two modules together; it only hides the cycle
from the interpreter). `from package import name` counts as importing the module `package.name` when
there is one, else `package` itself (so an `__init__.py` re-exporting from a submodule that imports the
package back is a cycle too).
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("node", "coordinator_tools")

# The one cycle left, kept on purpose: a protocol's ProtocolSpec types its callables with the Topology it checks
# and the ProtocolContext it starts in (node.protocols.base), while the Topology validates its protocol block
# against the registered specs (node.protocols.registry); node.context and node.receiver sit between them because
# they read the Topology. Breaking it splits the plug-in contract that outside protocols implement.
ALLOWED_CYCLES = frozenset({
    frozenset({"node.context", "node.protocols.base", "node.protocols.registry", "node.receiver", "node.topology"}),
})


def module_files(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Every module of our packages by dotted name: its file and whether it is a package's __init__."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def imported_modules(source: str, module: str, is_package: bool, modules: Collection[str]) -> set[str]:
    """Our modules that the import statements of `source` (the module `module`) read, relative imports resolved."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(_owning_module(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else _owning_module(base, modules))
    return {target for target in found if target is not None and target != module}


def _owning_module(name: str, modules: Collection[str]) -> str | None:
    """The longest prefix of `name` that is one of our modules (`import node.topology` reads node.topology)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> each of our modules it imports."""
    modules = module_files(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, (path, is_package) in modules.items():
        for target in imported_modules(path.read_text(encoding="utf-8"), module, is_package, modules):
            graph.add_edge(module, target)
    return graph


def cycles(graph: nx.DiGraph) -> list[frozenset[str]]:
    """Every strongly connected component of more than one module, largest first."""
    found = [frozenset(component) for component in nx.strongly_connected_components(graph) if len(component) > 1]
    return sorted(found, key=lambda component: (-len(component), sorted(component)))


def chain(graph: nx.DiGraph, component: frozenset[str]) -> str:
    """One cycle through the component, as `a -> b -> ... -> a`."""
    edges = nx.find_cycle(graph.subgraph(component), source=min(component))
    return " -> ".join([edge[0] for edge in edges] + [edges[0][0]])


def test_no_import_cycle_beyond_the_allowed_one() -> None:
    graph = import_graph()
    assert graph.number_of_nodes() > 100 and graph.number_of_edges() > 300  # the walk found our modules
    new = [component for component in cycles(graph) if component not in ALLOWED_CYCLES]
    assert not new, "import cycles:\n" + "\n".join(
        f"  {chain(graph, component)}  ({len(component)} modules: {', '.join(sorted(component))})"
        for component in new)


def test_every_allowed_cycle_still_exists() -> None:
    """A cycle that was broken leaves the allow-list, so it cannot come back unnoticed."""
    found = set(cycles(import_graph()))
    assert not ALLOWED_CYCLES - found, f"no longer cycles, remove from ALLOWED_CYCLES: {ALLOWED_CYCLES - found}"


def test_imports_inside_functions_and_type_checking_blocks_count(tmp_path: Path) -> None:
    """A cycle closed only by a function-local or TYPE_CHECKING import, or through a re-exporting package, is found."""
    package = tmp_path / "coordinator_tools"
    (package / "sub").mkdir(parents=True)
    (tmp_path / "node").mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from coordinator_tools.b import B\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from coordinator_tools.a import A\nB = 1\n")
    (package / "c.py").write_text("def f():\n    from . import d\n")
    (package / "d.py").write_text("import coordinator_tools.c\n")
    (package / "sub" / "__init__.py").write_text("from .e import E\n")
    (package / "sub" / "e.py").write_text("from coordinator_tools.sub import F\nE = 1\n")
    (package / "f.py").write_text("from coordinator_tools import a\n")
    graph = import_graph(tmp_path)
    assert set(cycles(graph)) == {frozenset({"coordinator_tools.a", "coordinator_tools.b"}),
                                  frozenset({"coordinator_tools.c", "coordinator_tools.d"}),
                                  frozenset({"coordinator_tools.sub", "coordinator_tools.sub.e"})}
    assert ("coordinator_tools.f", "coordinator_tools.a") in graph.edges  # `from package import module`
    assert ("coordinator_tools.f", "coordinator_tools") not in graph.edges
    assert chain(graph, frozenset({"coordinator_tools.a", "coordinator_tools.b"})) == (
        "coordinator_tools.a -> coordinator_tools.b -> coordinator_tools.a")
