"""A graph kernel's body (numba_cache/kernels/assembly/graph_body.py) counts references as numba would.

Its intrinsic emits the op kernel calls and the reference counts that numba's
lowering of one Python statement per node gave: a release missing leaks every
call's intermediates, one too many frees an array still in use. Each process
here runs two graphs: a function with two-output kernels (one returning a
tuple, one output unused; Nonzero's, returning a list) and values read by
several nodes; and, through the linker alone (PyTensor's functions copy such
outputs first), a graph returning its input, a constant and one value twice.
An Elemwise of a Composite there reads its lifted constants as views into the
graph kernel's pack. It counts numba's allocations over 50 calls (``NUMBA_NRT_STATS``) and checks
that the results of the first call are intact after them. Cold and warm
processes give the same bits; PyTensor's ``NUMBA`` is the reference, within
``NUMBA_ULP_BOUND``.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_python

from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance

SCRIPT = """
import gc, json
import numpy as np
import pytensor, pytensor.tensor as pt
import pytensor.scalar as ps
from pytensor.tensor.elemwise import Elemwise
import numba_cache
from numba_cache.codegen.lifted_constants import trailing_constants
from numba_cache.kernels.assembly import graph_body
if {calls_per_function!r} is not None:
    graph_body.CALLS_PER_FUNCTION = {calls_per_function!r}
from numba.core.runtime import rtsys
from pytensor.graph.fg import FunctionGraph
from pytensor.link.numba.linker import NumbaLinker
from numba_cache.integration.linker import NumbaCacheLinker

x = pt.dvector("x")
m = pt.dmatrix("m")
eigenvalues, _ = pt.linalg.eigh(m)  # a two-output kernel, one output unused
e = pt.exp(x)
# exp(x) and its sum fuse into one two-output kernel; boolean indexing of a matrix
# takes the two outputs of Nonzero, whose kernel returns a list.
outputs = [e, eigenvalues, (e * 2.0).sum() + pt.max(x), pt.log1p(e) * e, m[m > 1.5] * 2.0]
function = pytensor.function([x, m], outputs, mode={mode!r})
point = [np.linspace(-1.0, 1.0, 7), np.array([[2.0, 1.0], [1.0, 3.0]])]

y = pt.dvector("y")
exp_y = pt.exp(y)
constant = pt.constant(np.arange(3.0))
# An Elemwise of a Composite, as no rewrite leaves it: its constants lifted as tensors
# of one element, views into the graph kernel's pack.
s = ps.float64("s")
scaled = Elemwise(ps.Composite([s], [s * ps.constant(2.5) + ps.constant(-0.5)]))(exp_y)
linker = {{"NUMBA": NumbaLinker, "NUMBA_CACHE": NumbaCacheLinker}}[{mode!r}]()
fgraph = FunctionGraph([y], [y, exp_y, exp_y, constant, exp_y + constant, scaled], clone=False)
thunk, inputs, outputs = linker.accept(fgraph).make_thunk()

def call_linked():
    inputs[0].storage[0] = np.linspace(0.0, 1.0, 3)
    thunk()
    values = [output.storage[0] for output in outputs]
    for output in outputs:  # the caller holds the results, as a function's caller does
        output.storage[0] = None
    return values

first = [*function(*point), *call_linked()]
kept = [np.array(value, copy=True) for value in first]
gc.collect()
before = rtsys.get_allocation_stats()
for _ in range(50):
    function(*point)
    call_linked()
gc.collect()
after = rtsys.get_allocation_stats()
nodes = function.maker.fgraph.apply_nodes
print(json.dumps({{
    "allocated": after.mi_alloc - before.mi_alloc,
    "alive": (after.mi_alloc - after.mi_free) - (before.mi_alloc - before.mi_free),
    "multi_output_nodes": sorted(type(node.op).__name__ for node in nodes if len(node.outputs) > 1),
    "intact": all(np.array_equal(a, b) for a, b in zip(kept, first, strict=True)),
    "lifted": len(trailing_constants(scaled.owner)),
    "values": [np.asarray(value).tolist() for value in first],
    "stats": dict(numba_cache.session_stats()),
}}))
"""


def run(mode: str, calls_per_function: int | None = None) -> dict:
    return run_python(SCRIPT.format(mode=mode, calls_per_function=calls_per_function),
                      {"NUMBA_NRT_STATS": "1"})


@pytest.mark.parametrize("calls_per_function", [None, 1], ids=["one function", "a function a call"])
def test_references_are_released_and_results_intact_cold_and_warm(calls_per_function):
    """Also with the body split into functions (graph_body.CALLS_PER_FUNCTION), the values
    passing between them through the frame."""
    reference = run("NUMBA")
    cold = run("NUMBA_CACHE", calls_per_function)
    warm = run("NUMBA_CACHE", calls_per_function)
    assert cold["stats"].get("graph.miss") == 2 and warm["stats"].get("graph.hit") == 2
    assert warm["values"] == cold["values"]  # JSON floats round-trip exactly
    # The graph still has what it is meant to test.
    assert {"Eigh", "Nonzero"} <= set(cold["multi_output_nodes"]), cold["multi_output_nodes"]
    assert len(cold["multi_output_nodes"]) >= 3
    assert cold["lifted"] == 2
    for report in (reference, cold, warm):
        # Every call allocates its intermediates and results; none outlives the call
        # but the results, which Python frees when it drops them.
        assert report["allocated"] >= 50 * 6
        assert report["alive"] == 0
        assert report["intact"]
    assert max_ulp_distance([np.asarray(value) for value in cold["values"]],
                            [np.asarray(value) for value in reference["values"]]) <= NUMBA_ULP_BOUND


MANY_INPUTS = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache

# More inputs than a generated call may pass (ARGUMENTS_PER_CALL): grouped in tuples.
inputs = [pt.dvector(f"x{{position}}") for position in range({count})]
total = sum(pt.sin(x) * (position + 1) for position, x in enumerate(inputs))
function = pytensor.function(inputs, [total, inputs[-1] * 2.0], mode={mode!r})
values = function(*[np.linspace(0.0, 1.0, 3) + position for position in range({count})])
print(json.dumps({{"values": [np.asarray(value).tolist() for value in values],
                  "stats": dict(numba_cache.session_stats())}}))
"""


def test_a_graph_of_many_inputs_gets_them_all_in_order():
    count = 40
    reference = run_python(MANY_INPUTS.format(count=count, mode="NUMBA"))
    cold = run_python(MANY_INPUTS.format(count=count, mode="NUMBA_CACHE"))
    warm = run_python(MANY_INPUTS.format(count=count, mode="NUMBA_CACHE"))
    assert cold["stats"].get("graph.miss") == 1 and warm["stats"].get("graph.hit") == 1
    assert warm["values"] == cold["values"]
    assert max_ulp_distance([np.asarray(value) for value in cold["values"]],
                            [np.asarray(value) for value in reference["values"]]) <= NUMBA_ULP_BOUND


def test_arguments_nested_in_groups_reach_their_steps():
    """300 arguments: groups of groups (ARGUMENTS_PER_CALL squared is 256), unpacked
    in order; each step is a call by symbol of a kernel tripling its argument."""
    import numba

    from numba_cache.codegen.module import compile_function
    from numba_cache.codegen.sources import ARGUMENTS_PER_CALL, Step, _spelled, grouped
    from numba_cache.kernels.assembly.graph_body import graph_body

    count = 300
    assert count > ARGUMENTS_PER_CALL ** 2
    triple = numba.core.registry.CPUDispatcher(
        py_func=lambda x: x * 3.0, locals={},
        targetoptions={"nopython": True, "no_cpython_wrapper": True, "no_cfunc_wrapper": True})

    def serve(kernel, signature):
        triple.compile(signature)
        return triple.overloads[signature], True

    names = [f"a{position}" for position in range(count)]
    steps = [Step("k", (name,), (f"v{position}",)) for position, name in enumerate(names)]
    returned = ["v0", "v17", "v255", "v256", "v299"]
    body = graph_body(names, {}, steps, returned, serve)
    offsets = grouped([f"x + {position}.0" for position in range(count)])
    source = f"def run(x):\n    return graph_body({_spelled(offsets)})\n"
    run = numba.njit(compile_function(source, "run", "<test graph body>", {"graph_body": body}))
    assert run(1.0) == tuple(3.0 * (1.0 + int(name[1:])) for name in returned)


SPLIT = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.kernels.assembly import graph_body
from numba_cache.kernels.context import current_context
from numba_cache.store.entry_layout import decode_symbols, symbols_blob_name

graph_body.CALLS_PER_FUNCTION = 1
x = pt.dvector("x")
e = pt.exp(x)
function = pytensor.function([x], [pt.sort(e) * 2.0, pt.log1p(e).sum() + pt.max(x)],
                             mode="NUMBA_CACHE")
values = function(np.linspace(-1.0, 1.0, 7))
store = current_context().store
symbols = [name for entry in store.entries(kind="graph")
           for blob, data in store.read(entry.fingerprint, entry.key).blobs.items()
           if blob.startswith(symbols_blob_name(""))
           for name in decode_symbols(data)]
print(json.dumps({"values": [np.asarray(value).tolist() for value in values],
                  "parts": sorted(name for name in symbols if ".part" in name),
                  "stats": dict(numba_cache.session_stats())}))
"""


def test_a_body_with_op_kernels_linked_in_is_one_function(tmp_path):
    """A body calling its op kernels by symbol is split into functions; linked in
    (``NBCACHE_LINK_OPS=1``, the linked build's build), it is one, for the speed of
    its calls (versions.LINKED_BODY), with the same bits cold and warm."""
    by_symbol = run_python(SPLIT, {"NBCACHE_DIR": str(tmp_path / "by_symbol")})
    linked_env = {"NBCACHE_DIR": str(tmp_path / "linked"), "NBCACHE_LINK_OPS": "1"}
    linked, warm = run_python(SPLIT, linked_env), run_python(SPLIT, linked_env)
    assert by_symbol["stats"]["graph.miss"] == linked["stats"]["graph.miss"] == 1
    assert warm["stats"]["graph.hit"] == 1
    assert len(by_symbol["parts"]) >= 3, by_symbol["parts"]
    assert linked["parts"] == [], linked["parts"]
    assert warm["values"] == linked["values"]
    assert max_ulp_distance([np.asarray(value) for value in linked["values"]],
                            [np.asarray(value) for value in by_symbol["values"]]) <= NUMBA_ULP_BOUND


SAME_CODE = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.kernels.assembly import graph_body
from numba_cache.kernels.context import current_context
from numba_cache.store import entry_layout
graph_body.CALLS_PER_FUNCTION = 1

x = pt.dvector("x")
# Split in parts, several values returned: they pass through the frame.
outputs = [pt.cumsum(x), pt.sort(x), pt.concatenate([x, x]), pt.outer(x, x), pt.exp(x)]
pytensor.function([x], outputs, mode="NUMBA_CACHE")(np.linspace(0.0, 1.0, 4))
context = current_context()
digests = sorted(
    entry_layout.decode_digest(data)
    for info in context.store.entries(kind="graph")
    for name, data in context.store.read(info.fingerprint, info.key).blobs.items()
    if name.startswith(entry_layout.ir_digest_blob_name("")))
print(json.dumps({"digests": digests, "stats": dict(numba_cache.session_stats())}))
"""


def test_a_split_body_is_the_same_code_whatever_the_process_s_hash_seed(tmp_path):
    """The code of a graph kernel is a function of its graph: two cold processes with
    other hash seeds store the same IR (the collision detector compares it: a value
    loaded from the frame in a set's order made a sound entry read as a collision)."""
    digests = [run_python(SAME_CODE, {"NBCACHE_DIR": str(tmp_path / seed), "PYTHONHASHSEED": seed})
               for seed in ("1", "2", "3")]
    for result in digests:
        assert result["stats"].get("graph.miss") == 1 and len(result["digests"]) == 1
    assert digests[0]["digests"] == digests[1]["digests"] == digests[2]["digests"]
