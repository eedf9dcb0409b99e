"""Graph kernels call their op kernels by symbol: a new graph of stored ops compiles only its glue.

Each test runs fresh processes against one store: the first compiles graph A,
later ones compile graph B, made of the same ops arranged otherwise, or A again
after the store's op entries changed under it. Results are compared bit for bit
between the processes that compile and load a kernel, and within
``NUMBA_ULP_BOUND`` of PyTensor's ``NUMBA``.
"""

from __future__ import annotations

import shutil

import numpy as np
import store_states
from helpers import run_python

from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance

# Two graphs of five ops (Exp, ExpandDims, Dot with its BLAS pointer in an object-mode
# block, Squeeze, CumOp); B arranges them otherwise than A, so it is a new graph kernel.
COMPILE = """
import json, sys
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.integration.linker import graph_kernel_observers
from numba_cache.kernels.assembly import glue
{prelude}

graph_kernels = []
graph_kernel_observers.append(lambda fgraph, kernel, storage: graph_kernels.append(kernel))

x = pt.vector("x", shape=(5,))
m = pt.matrix("m", shape=(3, 5))
graphs = {{
    "A": lambda: [pt.exp(x), pt.dot(m, x), pt.cumsum(x)],
    "B": lambda: [pt.dot(m, pt.exp(x)), pt.cumsum(pt.exp(x))],
}}
point = [np.linspace(-1, 1, 5), np.arange(15.0).reshape(3, 5) / 7]
with count_numba_compiles() as compiles:
    function = pytensor.function([x, m], graphs[{graph!r}](), mode={mode!r})
    values = function(*point)
# The graph kernel's code, when this process compiled it: was it optimised as glue?
kernels = [compiled for kernel in graph_kernels for compiled in kernel.dispatcher.overloads.values()]
from numba_cache._compat.numba_internals import linked_libraries
print(json.dumps({{
    # The code libraries linked into it: (class, linking module parsed).
    "linked": sorted({{(type(library).__name__, getattr(library, "linking_module_parsed", None))
                      for kernel in kernels for library in linked_libraries(kernel.library)}}),
    "light": [getattr(kernel.library, "optimised_lightly", None) for kernel in kernels],
    "lean": [glue.GlueCompiler.lean_compiles, glue.GlueCompiler.full_refreshes],
    # Only numba's full refresh (CPUContext.load_additional_registries) imports it.
    "full_registries": "numba.np.polynomial.polynomial_core" in sys.modules,
    "compiles": compiles,
    "stats": dict(numba_cache.session_stats()),
    "values": [value.tolist() for value in values],
}}))
"""


def compile_graph(graph: str, mode: str = "NUMBA_CACHE", env: dict | None = None,
                  prelude: str = "") -> dict:
    return run_python(COMPILE.format(graph=graph, mode=mode, prelude=prelude), env)


def assert_like_numba(report: dict, reference: dict) -> None:
    values = [np.asarray(value) for value in report["values"]]
    expected = [np.asarray(value) for value in reference["values"]]
    assert max_ulp_distance(values, expected) <= NUMBA_ULP_BOUND


def test_a_new_graph_of_stored_ops_compiles_only_its_glue():
    cold = compile_graph("A")
    # The self-test's probe and the graph function, each with numba's registries
    # installed leanly (kernels/assembly/glue.py), the op kernels compiled in between with all.
    assert cold["lean"] == [2, 0] and cold["full_registries"]
    new = compile_graph("B")
    assert new["stats"].get("op.miss", 0) == 0 and new["stats"]["op.hit"] == 5
    assert new["stats"]["graph.miss"] == 1
    assert [name.split("_")[0] for name in new["compiles"]] == ["graph"]
    assert new["light"] == [True]  # it only calls: kernels/assembly/glue.py
    assert new["lean"] == [1, 0] and not new["full_registries"]
    loaded = compile_graph("B")
    assert loaded["compiles"] == [] and loaded["stats"]["graph.hit"] == 1
    assert loaded["values"] == new["values"]
    assert_like_numba(loaded, compile_graph("B", mode="NUMBA"))


def test_op_entries_compiled_again_elsewhere_make_the_graph_compile_again(private_store, tmp_path):
    """Op records from another store hold the same ops under other symbols: loading the
    graph against them would run other code or end the process; it is compiled again."""
    cold = compile_graph("A")
    root, other = private_store, tmp_path / "other"
    compile_graph("A", env={"NBCACHE_DIR": str(other)})
    # With the object-mode blocks they hold (numba named them anew there too).
    replaced = store_states.entries_of(other, {"op", "objmode"})
    for fingerprint, key in replaced:
        path = store_states.record_path(root, fingerprint, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(store_states.record_path(other, fingerprint, key), path)
    assert len(store_states.entries_of(other, {"op"})) == 5
    again = compile_graph("A")
    assert again["stats"]["links:unmet"] == 1 and again["stats"]["graph.miss"] == 1
    assert again["stats"].get("op.miss", 0) == 0
    assert [name.split("_")[0] for name in again["compiles"]] == ["graph"]
    loaded = compile_graph("A")
    assert loaded["compiles"] == [] and "links:unmet" not in loaded["stats"]
    assert cold["values"] == again["values"] == loaded["values"]


def test_an_op_entry_gone_is_compiled_again_with_the_graph(private_store):
    cold = compile_graph("A")
    fingerprint, key = store_states.entries_of(private_store, {"op"})[0]
    store_states.record_path(private_store, fingerprint, key).unlink()
    again = compile_graph("A")
    assert again["stats"]["links:unmet"] == 1 and again["stats"]["op.miss"] == 1
    loaded = compile_graph("A")
    assert loaded["compiles"] == [] and loaded["stats"]["graph.hit"] == 1
    assert cold["values"] == again["values"] == loaded["values"]


def test_linked_op_kernels_are_a_setting_and_a_key_of_their_own():
    """``NBCACHE_LINK_OPS=1`` links op kernels in, as numba does: another graph key, the
    same ops, and results within the bound of the kernels called by symbol."""
    by_symbol = compile_graph("B")
    linked = compile_graph("B", env={"NBCACHE_LINK_OPS": "1"})
    assert linked["stats"]["graph.miss"] == 1 and linked["stats"].get("op.miss", 0) == 0
    assert linked["stats"].get("links:unmet", 0) == 0
    assert linked["light"] == [False]  # linked code is optimised as numba does
    # The op kernels came from the store without their linking modules (kernels/
    # stored_library.py), which were parsed when this compile linked them in.
    assert ["StoredLibrary", True] in linked["linked"]
    assert ["StoredLibrary", False] not in linked["linked"]
    assert_like_numba(linked, by_symbol)
    assert compile_graph("B", env={"NBCACHE_LINK_OPS": "1"})["stats"]["graph.hit"] == 1


def test_a_graph_function_lean_registries_do_not_do_for_is_compiled_with_all(tmp_path):
    """Should the lean registries not do for a graph function, it is compiled again after
    numba's full refresh: the same calls, the same bits, no failed compile. (Here the
    lean install is emptied; each store compiles A, then B's graph function.)"""
    starved_store = {"NBCACHE_DIR": str(tmp_path / "starved")}
    compile_graph("A")
    compile_graph("A", env=starved_store)
    lean = compile_graph("B")
    starved = compile_graph("B", env=starved_store, prelude=(
        "glue._install_for_calls = lambda target_context: None"))
    assert lean["lean"] == [1, 0] and lean["stats"]["graph.miss"] == 1
    assert starved["lean"] == [0, 1] and starved["stats"]["graph.miss"] == 1
    assert starved["full_registries"] and starved["light"] == [True]
    assert starved["values"] == lean["values"]
