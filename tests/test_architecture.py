"""The package's shape: no import circles between its modules, no module importing a
module of a higher layer, and numba's internals imported only through ``_compat``
(or by the modules listed below, each saying why)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numba_cache

PACKAGE_ROOT = Path(numba_cache.__file__).parent


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported_names(path: Path, name: str, modules: set[str] = frozenset()) -> set[str]:
    """What `path` (the module `name`) imports, at any depth (lazy imports count), relative
    imports made absolute: of ``from a import b``, the module ``a.b`` if it is one of
    `modules`, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                found.add(submodule if submodule in modules else module)
    return found


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The package's modules that `path` (the module `name`) imports."""
    return imported_names(path, name, modules) & modules


def import_graph() -> dict[str, set[str]]:
    """Edges between modules, less those to a module's own packages (Python imports them first)."""
    paths = module_names()
    modules = set(paths)
    graph = {}
    for name, path in paths.items():
        ancestors = {name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1)}
        graph[name] = imports_of(path, name, modules) - ancestors - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_back_through_others():
    assert circles(import_graph()) == []


#: The package's layers, bottom first, by their first name under ``numba_cache`` ("" is
#: the package itself, the public API). A module imports modules of its own layer and of
#: those below it, never of one above.
LAYERS = (
    # upstream's internals; formats' versions; the logger; the process's mutable state;
    # the garbage collector's scope during a compile
    ("_compat", "versions", "logs", "session", "collector"),
    ("cpu_target", "settings"),
    ("codegen", "store"),  # generated source; entries on disk, and what an entry holds
    ("keys",),
    ("kernels",),  # where a numba compile turns into a cache lookup (levels 2 and 3)
    ("rewritten",),  # level 1: the rewritten graph
    ("integration", "diagnostics", "evaluation"),
    ("portable",),
    ("cli", "pytest_plugin", "pytest_summary", "__main__", ""),  # the ways in
)

#: Imports of a module of a higher layer, kept on purpose, by importing module: why.
UPWARD_IMPORTS: dict[str, str] = {}

#: Upstream internals the rest of the package reaches only through ``_compat``.
NUMBA_INTERNALS = ("numba.core", "llvmlite")

#: Modules outside ``_compat`` that import numba's internals themselves: why.
IMPORTS_NUMBA_INTERNALS = {
    "numba_cache.evaluation.compile_events": "counts compiles with numba's event API",
    "numba_cache.integration.nutpie": "recognises nutpie's cfunc wrappers by numba's dispatcher "
    "and intrinsic classes, and registers their typing",
    "numba_cache.kernels.runtime.blocks": "tells an object-mode block by numba's ObjModeLiftedWith",
    "numba_cache.kernels.probes": "probes read numba's internals (method sources) beside "
    "running numba_cache's code on them",
    "numba_cache.kernels.protocol.cache": "KernelCache is the cache object numba's dispatchers consult "
    "(a numba _Cache)",
    "numba_cache.kernels.callbacks.cfunc": "wraps numba's CFunc so that C callbacks are stored",
    "numba_cache.kernels.context": "initialises numba's CPU target for the self-test",
    "numba_cache.kernels.protocol.dispatcher": "cached dispatchers are numba CPUDispatchers",
    "numba_cache.kernels.callbacks.entry_point": "emits an entry point's LLVM IR with numba's cgutils",
    "numba_cache.kernels.assembly.glue": "a compiler pipeline and code library of numba's, subclassed",
    "numba_cache.kernels.assembly.graph_body": "a graph body is a numba intrinsic, emitted as LLVM IR",
    "numba_cache.kernels.callbacks.hidden_symbols": "registers hidden constants as LLVM process symbols",
    "numba_cache.kernels.callbacks.links": "reads the symbols stored machine code leaves undefined",
    "numba_cache.kernels.runtime.objmode": "compiles object-mode blocks through numba's Python API",
    "numba_cache.kernels.assembly.op_links": "pickles numba signatures as numba's own cache does",
    "numba_cache.kernels.assembly.predicted_types": "predicts numba types",
    "numba_cache.kernels.outcomes.replaced_numba": "tells test doubles from numba's Dispatcher",
    "numba_cache.kernels.protocol.self_contained": "a compiler pipeline and code library of numba's, "
    "subclassed",
    "numba_cache.kernels.protocol.serialize": "serializes compile results the way numba's cache does",
    "numba_cache.kernels.protocol.stored_library": "a numba JIT code library, subclassed",
    "numba_cache.kernels.assembly.symbol_calls": "emits calls by symbol with numba's cgutils",
    "numba_cache.keys.fingerprint": "reads the CPU and settings numba's codegen compiles for",
}


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    [layer] = [n for n, members in enumerate(LAYERS) if top in members]
    return layer


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """The modules of a higher layer each module imports, for the modules that do."""
    found = {}
    for module, targets in graph.items():
        above = sorted(target for target in targets if layer_of(target) > layer_of(module))
        if above:
            found[module] = above
    return found


def test_every_package_has_a_layer():
    for module in module_names():
        layer_of(module)  # raises if its package is in no layer, or in two


def test_the_upward_import_finder_finds_one():
    graph = {"numba_cache.store.record": {"numba_cache.kernels.protocol.cache"},
             "numba_cache.kernels.protocol.cache": {"numba_cache.store.record"}}
    assert upward_imports(graph) == {"numba_cache.store.record": ["numba_cache.kernels.protocol.cache"]}


def test_no_module_imports_a_module_of_a_higher_layer():
    found = upward_imports(import_graph())
    assert {module: targets for module, targets in found.items()
            if module not in UPWARD_IMPORTS} == {}
    assert sorted(UPWARD_IMPORTS) == sorted(found), "an upward import listed is gone: unlist it"


def test_numba_internals_are_imported_through_compat_or_for_a_listed_reason():
    importing = set()
    for name, path in module_names().items():
        if name.startswith("numba_cache._compat"):
            continue
        if any(imported == upstream or imported.startswith(f"{upstream}.")
               for imported in imported_names(path, name) for upstream in NUMBA_INTERNALS):
            importing.add(name)
    assert sorted(importing - set(IMPORTS_NUMBA_INTERNALS)) == []
    assert sorted(set(IMPORTS_NUMBA_INTERNALS) - importing) == [], "listed, yet imports none"


def test_each_package_maps_its_modules():
    """Each package of kernels/ and rewritten/ lists its modules (or sub-packages) by role in
    its docstring for a reader: a module added or removed is put on the map, or taken off it."""
    import importlib

    names = module_names()
    packages = [name for name, path in names.items() if path.name == "__init__.py"
                and name.startswith(("numba_cache.kernels", "numba_cache.rewritten"))]
    assert "numba_cache.kernels.protocol" in packages
    for package in packages:
        children = {name.rpartition(".")[2] for name in names
                    if name.rpartition(".")[0] == package}
        mapped = set(re.findall(r":mod:`\.(\w+)`", importlib.import_module(package).__doc__))
        assert mapped == children, package
