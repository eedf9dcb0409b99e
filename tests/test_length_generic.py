"""Op kernels of ours for every length (numba_cache/kernels/assembly/length_generic.py).

``AllocDiag``'s own conversion bakes its vector's length into the code; ours serves
every length with one kernel and must give PyTensor's values bit for bit (it only
copies them). Compared with PyTensor's ``NUMBA`` and Python modes for several
offsets, dtypes and lengths (1, 3, 40), in fresh processes on one store.
"""

from __future__ import annotations

import pytest
from helpers import run_python

#: ``AllocDiag`` is inlined at PyTensor's specialize step unless excluded; in a model it
#: survives where a later rewrite makes it (the gradient of a Cholesky factor's diagonal).
DIAGONALS = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
from pytensor.compile.mode import Mode, get_mode
import numba_cache

length = {length}
dtypes = ["float64", "float32", "int32", "complex128", "bool"]
inputs = [pt.vector(f"v_{{dtype}}", dtype=dtype, shape=(length,)) for dtype in dtypes]
outputs = [pt.diag(vector, k=offset) for vector in inputs for offset in (-2, 0, 1)]
values = [(np.arange(length) * 1.75 - 2.5).astype(dtype) for dtype in dtypes]
values[-1] = np.arange(length) % 2 == 0
modes = {{"ours": get_mode("NUMBA_CACHE").excluding("inline_ofg"),
          "numba": get_mode("NUMBA").excluding("inline_ofg"),
          "python": Mode(linker="py", optimizer="fast_run").excluding("inline_ofg")}}
results, kept = {{}}, {{}}
for name, mode in modes.items():
    function = pytensor.function(inputs, outputs, mode=mode)
    kept[name] = sum(type(node.op).__name__ == "AllocDiag"
                     for node in function.maker.fgraph.apply_nodes)
    results[name] = [[np.asarray(out).dtype.str, np.asarray(out).shape,
                      np.asarray(out).tobytes().hex()] for out in function(*values)]
print(json.dumps({{"results": results, "kept": kept,
                  "stats": dict(numba_cache.session_stats())}}))
"""


@pytest.fixture(scope="module")
def diagonals(tmp_path_factory):
    """The graph of diagonals at lengths 3, then 40, then 1, each in a fresh process,
    on one store."""
    env = {"NBCACHE_DIR": str(tmp_path_factory.mktemp("length-generic") / "store")}
    return {length: run_python(DIAGONALS.format(length=length), env=env)
            for length in (3, 40, 1)}


@pytest.mark.parametrize("length", [3, 40, 1])
def test_allocdiag_gives_the_bits_of_numba_and_python_at_every_length(diagonals, length):
    run = diagonals[length]
    assert run["kept"]["ours"] == run["kept"]["numba"] == 15  # the op under test ran
    assert run["results"]["ours"] == run["results"]["numba"] == run["results"]["python"]


def test_one_allocdiag_kernel_serves_every_length(diagonals):
    """Lengths 3 and 40 share each op kernel (a kernel per offset and dtype), and the
    graph kernel: the second process compiles nothing, nor converts an op (the op
    kernel keys remembered for the graph at any length serve it). Length 1 is another
    kernel (kernel-level types tell a length of 1 from others): it compiles its own."""
    first, other, one = (diagonals[length]["stats"] for length in (3, 40, 1))
    assert first["op.miss"] == 15, first
    assert "op.miss" not in other and other["op.hit"] == 15, other
    assert other["op_keys.remembered"] == 1 and "graph.miss" not in other, other
    assert one["op.miss"] == 15, one


def test_allocdiag_still_has_the_props_and_inner_graph_the_conversion_reproduces():
    """The upstream seam: PyTensor's ``AllocDiag`` keeps its class, its props, and
    builds zeros with the vector on diagonal ``offset`` (what the conversion computes)."""
    import numpy as np
    import pytensor
    import pytensor.tensor as pt
    from pytensor.tensor.basic import AllocDiag

    from numba_cache.kernels.assembly.length_generic import length_generic

    assert AllocDiag.__props__ == ("axis1", "axis2", "offset")
    vector = pt.vector("v", shape=(4,))
    node = pt.diag(vector, k=-1).owner
    assert isinstance(node.op, AllocDiag)
    assert length_generic(node.op, node) is not None
    computed = pytensor.function([vector], node.outputs[0], mode="FAST_COMPILE")(
        np.arange(1.0, 5.0))
    assert np.array_equal(computed, np.diag(np.arange(1.0, 5.0), k=-1))


def test_a_conversion_registered_for_allocdiag_is_used_instead_of_ours():
    """A numba conversion registered for ``AllocDiag`` itself (by a user, or by PyTensor
    one day) takes precedence: ours steps aside, and the op kernel is the registered one's."""
    code = """
import json
import pytensor.tensor as pt
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_and_cache_key
from pytensor.tensor.basic import AllocDiag
from numba_cache.kernels.assembly.length_generic import length_generic

node = pt.diag(pt.vector("v", shape=(4,))).owner
before = length_generic(node.op, node) is not None

@register_funcify_and_cache_key(AllocDiag)
def registered(op, node=None, **kwargs):
    return numba_njit(lambda diagonal: diagonal), "registered"

print(json.dumps({"before": before, "after": length_generic(node.op, node) is not None}))
"""
    result = run_python(code)
    assert (result["before"], result["after"]) == (True, False)
