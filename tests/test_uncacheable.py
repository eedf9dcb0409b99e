"""Uncacheable kernels: compiled fresh, never persisted, reported; the rest stays cached."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_python, without_op_loads

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

COMPILE_WITH_OP = """
import json, warnings
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.kernels.context import current_context
import baked_ops

{setup}
x, y = pt.vectors("x", "y")
with warnings.catch_warnings(record=True) as caught, count_numba_compiles() as compiles:
    warnings.simplefilter("always")
    f = pytensor.function([x, y], {expression}, mode="NUMBA_CACHE")
    value = f(np.arange(3.0), np.ones(3))
store = current_context().store
print(json.dumps({{
    "value": np.asarray(value).tolist(),
    "compiled": compiles,
    "stats": dict(numba_cache.session_stats()),
    "warnings": [str(w.message) for w in caught if "numba_cache" in str(w.message)],
    "entries": [[e.kind, e.summary, e.cacheable, e.reason] for e in store.entries()],
}}))
"""


def compile_twice(expression: str, setup: str = ""):
    """A cold and a warm process; each result's ``logged`` holds the uncacheable notices."""
    code = COMPILE_WITH_OP.format(expression=expression, setup=setup)
    results = [run_python(code, {"NBCACHE_LOG": "info"}) for _ in range(2)]
    for result in results:
        result["logged"] = [line for line in result["stderr"].splitlines()
                            if "will not persist" in line]
        # Logged and counted, never warned: numba_cache says what NUMBA says, no more.
        assert result["warnings"] == [], result["warnings"]
    return results


def test_kernel_with_a_baked_blas_pointer_is_never_persisted_but_its_neighbours_are():
    cold, warm = compile_twice("baked_ops.BakedDot()(pt.exp(x), y) + 1")
    expected = float(np.exp(np.arange(3.0)).sum() + 1)
    assert cold["value"] == warm["value"] == expected

    [op_entry] = [e for e in cold["entries"] if "BakedDot" in e[1]]
    assert op_entry[2:] == [False, "baked-address"]
    [graph_entry] = [e for e in cold["entries"] if e[0] == "graph"]
    # The graph kernel links the baked code, so its own IR scan finds the address too.
    assert graph_entry[2:] == [False, "baked-address"]
    assert any(e[2] for e in cold["entries"] if e[0] == "op"), "the other op kernels are cached"
    assert any("BakedDot" in line and "address" in line for line in cold["logged"])
    assert cold["stats"]["uncacheable:baked-address"] >= 1

    # The next process compiles the baked kernel (and the graph linking it) afresh,
    # and loads the other op kernels.
    assert warm["stats"]["op.hit"] >= 2 and "op.miss" not in warm["stats"]
    assert any("baked_dot" in name for name in warm["compiled"])
    assert warm["stats"]["uncacheable:baked-address"] >= 1


def test_kernel_calling_blas_through_ctypes_is_flagged_by_numbas_own_criteria():
    cold, warm = compile_twice("baked_ops.CtypesDot()(x, y)")
    assert cold["value"] == warm["value"] == 3.0
    [op_entry] = [e for e in cold["entries"] if "CtypesDot" in e[1]]
    assert op_entry[2:] == [False, "dynamic-globals"]


def test_registered_op_type_is_not_persisted():
    setup = (
        "numba_cache.register_uncacheable(pt.elemwise.Elemwise, 'registered in a test')\n"
    )
    cold, warm = compile_twice("pt.exp(x) * y", setup)
    kernels = [e for e in cold["entries"] if e[0] in ("op", "graph")]
    assert kernels and all(e[3] in ("registered", "contains-uncacheable") for e in kernels)
    assert warm["compiled"], "nothing was persisted, so the next process compiles again"
    assert cold["value"] == warm["value"]


def test_blas_lapack_kernels_that_look_up_pointers_at_run_time_stay_cacheable():
    expression = (
        "pt.linalg.solve(pt.outer(x, x) + 3 * pt.eye(3), y).sum()"
        " + pt.linalg.cholesky(pt.outer(y, y) + pt.eye(3)).sum() + pt.dot(x, y)"
    )
    cold, warm = compile_twice(expression)
    assert all(e[2] for e in cold["entries"]), cold["entries"]  # kernels and rewritten graph
    # Each routine's pointer getter holds an object-mode block, stored with the kernels;
    # the warm process loads those it runs (solve's, cholesky's, dot's) and compiles nothing.
    blocks = [e for e in cold["entries"] if e[0] == "objmode"]
    assert len(blocks) >= 3 and all("_pointer" in e[1] for e in blocks), cold["entries"]
    assert warm["stats"]["objmode.hit"] >= 3 and "objmode.miss" not in warm["stats"]
    assert set(without_op_loads(warm["stats"])) == {"rewrite.hit", "graph.hit", "objmode.hit"}
    assert warm["compiled"] == []
    assert cold["value"] == warm["value"]



def test_constant_too_large_to_freeze_is_passed_as_an_argument_and_stays_cacheable():
    # 2 MB: over numba's 1e6-byte limit for freezing an array into machine code,
    # which would make the kernel uncacheable; as a hidden argument it is not frozen.
    setup = "big = np.linspace(0, 1, 250_000)\ny_big = pt.as_tensor(big)"
    expression = "pt.exp(y_big * x[0]).sum() * y"
    cold, warm = compile_twice(expression, setup)
    assert cold["value"] == warm["value"]
    assert all(e[2] for e in cold["entries"]), cold["entries"]
    assert warm["compiled"] == [] and without_op_loads(warm["stats"]) == {"rewrite.hit": 1, "graph.hit": 1}
