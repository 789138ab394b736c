"""No import cycle among podnet's modules, read from the source with ``ast``.

Every import counts: at module level, inside functions (an import put off until a call
still makes the two modules depend on each other), and under ``if TYPE_CHECKING:``
(a type the module names is a dependency, whether or not it is imported at run time).
The modules are the ones pyproject.toml packages (its ``package-dir`` mapping), so a
module added to the tree is checked without changing this file.

It also checks that the import contracts (pyproject.toml, ``lint-imports``) place every
core module: in a layer, either public to providers or forbidden to them, and either open
to the node agent or forbidden to it.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Import:
    importer: str
    imported: str
    line: int
    #: "module", "function" (inside a def) or "type-checking" (under TYPE_CHECKING)
    where: str


def _modules() -> dict[str, Path]:
    """Every podnet module the distribution ships -> its source file."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    dirs: dict[str, str] = setup["package-dir"]
    found: dict[str, Path] = {}
    for package in setup["packages"]:
        top = max((p for p in dirs if package == p or package.startswith(p + ".")), key=len)
        folder = ROOT / dirs[top] / Path(*package[len(top):].split(".")[1:])
        for source in sorted(folder.glob("*.py")):
            name = package if source.stem == "__init__" else f"{package}.{source.stem}"
            found[name] = source
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(name: str) -> str | None:
    """The deepest podnet module a dotted name lies in, if any."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[Import] = []
        self._where = ["module"]

    def _add(self, target: str | None, node: ast.stmt) -> None:
        if target is not None and target != self.module:
            self.found.append(Import(self.module, target, node.lineno, self._where[-1]))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(_resolve(alias.name), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            # ``from package import module`` imports the module; else the names' module
            self._add(_resolve(f"{base}.{alias.name}") or _resolve(base), node)

    def _nested(self, where: str, node: ast.AST) -> None:
        self._where.append(where if self._where[-1] == "module" else self._where[-1])
        self.generic_visit(node)
        self._where.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._nested("function", node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._nested("function", node)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._where.append("type-checking")
            for child in node.body:
                self.visit(child)
            self._where.pop()
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)


def imports_of(module: str) -> list[Import]:
    source = MODULES[module]
    tree = ast.parse(source.read_text("utf-8"), filename=str(source))
    collector = _Collector(module, source.stem == "__init__")
    collector.visit(tree)
    return collector.found


def import_graph() -> dict[str, dict[str, list[Import]]]:
    """importer -> imported -> the import statements making that edge."""
    graph: dict[str, dict[str, list[Import]]] = {m: {} for m in MODULES}
    for module in MODULES:
        for imp in imports_of(module):
            graph[module].setdefault(imp.imported, []).append(imp)
    return graph


def cycles(graph: Mapping[str, Mapping[str, object]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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
    return sorted(found)


def _describe(graph: dict[str, dict[str, list[Import]]], component: list[str]) -> Iterator[str]:
    members = set(component)
    for importer in component:
        for imported, imps in sorted(graph[importer].items()):
            if imported in members:
                for imp in imps:
                    yield f"{importer}:{imp.line} -> {imported} ({imp.where})"


def _report(graph: dict[str, dict[str, list[Import]]], found: list[list[str]]) -> str:
    return "\n".join(line for component in found for line in _describe(graph, component))


# --- the import contracts cover every module ------------------------------------------------

def _core_children() -> set[str]:
    """podnet.core's modules and subpackages, as the contracts name them."""
    return {name.split(".")[2] for name in MODULES
            if name.startswith("podnet.core.")}


def _contract(name_start: str) -> dict[str, object]:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    contracts: list[dict[str, object]] = setup["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if str(c["name"]).startswith(name_start))


def test_every_core_module_is_in_a_layer() -> None:
    layers = _contract("layers:")["layers"]
    assert isinstance(layers, list)
    placed = [m.strip() for layer in layers for m in str(layer).split(":")]
    in_core = [m.removeprefix("podnet.core.") for m in placed if m.startswith("podnet.core.")]
    assert sorted(in_core) == sorted(_core_children()), "place each core module in a layer"


def test_no_core_module_is_public_to_providers() -> None:
    """One door: providers import podnet.hookspecs (and podnet.linux), nothing of core,
    directly or not."""
    contract = _contract("providers import only")
    forbidden = contract["forbidden_modules"]
    assert isinstance(forbidden, list)
    assert {"podnet.core", "podnet.app", "podnet.sim"} <= set(forbidden)
    assert contract.get("allow_indirect_imports", "False") == "False"
    plugins = [name for name in MODULES if name.startswith("podnet.plugins.")]
    assert plugins
    outside = [f"{name} -> {i.imported}" for name in plugins for i in imports_of(name)
               if i.imported.startswith("podnet.")
               and not i.imported.startswith(("podnet.hookspecs", "podnet.linux",
                                              "podnet.plugins"))]
    assert outside == []


#: core's models and their helpers, which the node agent reads records with
NODE_MODELS = {"annotations", "attachments", "errors", "models", "objects", "policy", "pool",
               "ratelimit"}
#: core's services the node agent is a client of, as the controllers are
NODE_SERVICES = {"clock", "cluster", "convert", "fence", "gateway", "netpol", "plugin", "probes",
                 "tracing", "version"}


def test_every_core_module_is_open_or_forbidden_to_the_node_agent() -> None:
    forbidden = _contract("the node agent imports")["forbidden_modules"]
    assert isinstance(forbidden, list)
    internal = {m.removeprefix("podnet.core.") for m in forbidden if m.startswith("podnet.core.")}
    open_to_node = NODE_MODELS | NODE_SERVICES
    assert {"engine", "reconcile"} <= internal, "the node agent never imports a controller"
    assert not internal & open_to_node
    assert internal | open_to_node == _core_children()


def test_the_node_agent_knows_no_providers_dataplane() -> None:
    """The agent asks a dataplane for a capability (``podnet.linux.hooks``), never whose
    class it is: no module of the node layer imports one provider's dataplane."""
    node = [m for m in MODULES if m == "podnet.node" or m.startswith("podnet.node.")]
    assert "podnet.node.agent" in node
    for module in node:
        assert "podnet.linux.eni" not in {i.imported for i in imports_of(module)}, module


# --- the reader itself ---------------------------------------------------------------------


def test_every_shipped_package_is_read() -> None:
    packages = {name for name, path in MODULES.items() if path.stem == "__init__"}
    assert {"podnet.app", "podnet.core", "podnet.core.reconcile", "podnet.hookspecs",
            "podnet.node", "podnet.plugins.reference", "podnet.testing"} <= packages
    assert "podnet.core.engine" in MODULES and "podnet.plugins.ovn.provider" in MODULES
    # a subpackage of core is read too (tracing's parts, the in-memory cluster in sim)
    assert {"podnet.core.tracing", "podnet.core.tracing.spans", "podnet.sim.memory"} <= set(
        MODULES)


def test_function_local_and_type_checking_imports_are_read() -> None:
    kinds = {(i.imported, i.where) for i in imports_of("podnet.core.metrics")}
    assert ("podnet.core.fence", "type-checking") in kinds
    kinds = {(i.imported, i.where) for i in imports_of("podnet.app.cli")}
    assert ("podnet.app.demo", "type-checking") in kinds
    assert ("podnet.app.host", "function") in kinds
    # ``from package import module`` is an import of the module
    assert ("podnet.hookspecs.models", "module") in {
        (i.imported, i.where) for i in imports_of("podnet.core.convert")}


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [
        ["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


# --- the property --------------------------------------------------------------------------


def test_no_import_cycle_among_podnet_modules() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert found == [], "import cycles:\n" + _report(graph, found)


def test_no_controller_imports_the_engine() -> None:
    """The reconcilers receive the engine's parts; none knows the engine, not even for
    its type."""
    for module in MODULES:
        if module.startswith("podnet.core.reconcile."):
            assert "podnet.core.engine" not in {i.imported for i in imports_of(module)}, module


def test_the_engine_imports_its_controllers_at_module_level() -> None:
    kinds = {(i.imported, i.where) for i in imports_of("podnet.core.engine")}
    for controller in ("podnetwork", "nodepool", "gc"):
        assert (f"podnet.core.reconcile.{controller}", "module") in kinds


def test_the_cni_plugin_is_no_python_module() -> None:
    """``podnet-cni`` is a static executable built from ``cni/podnet-cni.c``
    (``tests/test_cni_static.py``): no ``podnet.cni`` package ships, and ``cni/`` holds
    no Python a distribution could pick up."""
    assert not any(m == "podnet.cni" or m.startswith("podnet.cni.") for m in MODULES)
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert "podnet.cni" not in setup["tool"]["setuptools"]["package-dir"]
    assert not any("podnet.cni" in target for target in setup["project"]["scripts"].values())
    assert not list((ROOT / "cni").glob("*.py"))
    assert (ROOT / "cni" / "podnet-cni.c").is_file()
