"""A warm process runs PyTensor's object-mode blocks without importing PyTensor's numba
dispatch (numba_cache/kernels/runtime/detached.py), and computes the same bits.

A GP-like graph (Cholesky factor, triangular solve, their gradients) is compiled in a
fresh process on an empty store, then run in fresh processes on that store: one that
imports nothing of the dispatch, one that imports it first (numba's own way of finding
the blocks' globals). All three give the same bits, and the same as ``NUMBA`` mode.
"""

from __future__ import annotations

import types

import pytest
from helpers import run_python

from numba_cache.kernels.runtime import detached

GP_LIKE = """
import json, sys, warnings
import numpy as np
PREAMBLE
import pytensor, pytensor.tensor as pt
import numba_cache

a = pt.matrix("a", shape=(4, 4))
b = pt.vector("b", shape=(4,))
factor = pt.linalg.cholesky(a @ a.T + 4.0 * pt.eye(4))
z = pt.linalg.solve_triangular(factor, b, lower=True)
logp = -0.5 * (z @ z) - pt.log(pt.diag(factor)).sum()
outputs = [logp, *pytensor.grad(logp, [a, b])]
points = [np.arange(16.0).reshape(4, 4) / 7.0, np.linspace(-1.0, 1.0, 4)]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    values = pytensor.function([a, b], outputs, mode="NUMBA_CACHE")(*points)
dispatch_imported = "pytensor.link.numba.dispatch" in sys.modules
linalg_imported = "numba.np.linalg" in sys.modules
scipy_linalg_imported = "scipy.linalg" in sys.modules
numba_bits = None
if COMPARE_WITH_NUMBA:
    numba_values = pytensor.function([a, b], outputs, mode="NUMBA")(*points)
    numba_bits = [np.asarray(v).tobytes().hex() for v in numba_values]
print(json.dumps({
    "bits": [np.asarray(v).tobytes().hex() for v in values],
    "numba_bits": numba_bits,
    "dispatch_imported": dispatch_imported,
    "linalg_imported": linalg_imported,
    "scipy_linalg_imported": scipy_linalg_imported,
    "stats": dict(numba_cache.session_stats()),
    "warnings": [str(w.message) for w in caught if "numba_cache" in str(w.message)],
}))
"""


def _child(preamble: str = "", compare_with_numba: bool = False) -> str:
    return GP_LIKE.replace("PREAMBLE", preamble).replace(
        "COMPARE_WITH_NUMBA", str(compare_with_numba))


@pytest.mark.slow
def test_a_warm_process_runs_stored_blocks_without_the_dispatch_and_gives_the_same_bits(
        private_store):
    cold = run_python(_child(compare_with_numba=True))
    assert cold["dispatch_imported"]  # it converted the graph
    assert cold["bits"] == cold["numba_bits"]

    warm = run_python(_child())
    assert not warm["dispatch_imported"], warm["stats"]
    assert not warm["linalg_imported"]  # numba's get_blas_kind carried by value
    assert not warm["scipy_linalg_imported"]  # LAPACK's addresses found without it
    assert warm["stats"].get("objmode.hit", 0) >= 2 and "objmode.miss" not in warm["stats"], (
        warm["stats"])
    assert warm["bits"] == cold["bits"]
    assert warm["warnings"] == []

    # numba's way: the blocks' globals from their modules, imported first.
    imported = run_python(_child("import pytensor.link.numba.dispatch"))
    assert imported["stats"].get("objmode.hit", 0) >= 2, imported["stats"]
    assert imported["bits"] == cold["bits"]


SPECIAL = """
import json, sys
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
import numba.core.extending
from numba_cache.kernels.runtime import cython_addresses

x = pt.dvector("x")
outputs = [pt.i0(x) + pt.i1(x), pt.i0(x) * pt.sqrt(x)]
point = np.array([0.5, 1.5, 3.0])
values = pytensor.function([x], outputs, mode="NUMBA_CACHE")(point)
numba_values = pytensor.function([x], outputs, mode="NUMBA")(point)
print(json.dumps({
    "bits": [np.asarray(v).tobytes().hex() for v in values],
    "numba_bits": [np.asarray(v).tobytes().hex() for v in numba_values],
    "stats": dict(numba_cache.session_stats()),
    # What the carried namespaces may change: their own copies, never a module's globals.
    "modules_untouched": (
        numba.core.extending.get_cython_function_address.__module__ == "numba.core.extending"
        and cython_addresses.get_cython_function_address
        is numba.core.extending.get_cython_function_address),
}))
"""


@pytest.mark.slow
def test_a_warm_process_runs_several_scipy_special_blocks_and_changes_no_modules_globals(
        private_store):
    """Each ``scipy.special`` kernel carries numba's ``get_cython_function_address`` by
    reference; swapping it in the module it came from made the next block's lookup call
    itself (a RecursionError in every warm process of a model with two such ops)."""
    cold = run_python(SPECIAL)
    assert cold["bits"] == cold["numba_bits"] and cold["modules_untouched"]
    for _ in range(2):  # the second warm process loads what the first one may have stored
        warm = run_python(SPECIAL)
        assert warm["stats"].get("objmode.hit", 0) >= 2, warm["stats"]
        assert warm["bits"] == cold["bits"]
        assert warm["modules_untouched"]


def test_a_function_writing_a_global_is_not_carried():
    def counts():
        global _calls
        _calls = 1

    assert not detached._pure(counts, set())


def test_a_function_reading_a_mutable_global_is_not_carried():
    assert not detached._pure(_reads_a_table, set())


def test_a_function_reading_functions_and_constants_is_carried():
    assert detached._pure(_reads_a_function_and_a_constant, set())


def test_numba_functions_reading_only_tables_numba_never_writes_are_carried():
    from numba.np import linalg

    assert detached._pure(linalg.get_blas_kind, set())
    # The same code reading a table of that module numba_cache does not know as never written:
    reads_another_table = types.FunctionType(
        _reads_a_table.__code__, {"_TABLE": {"float64": "d"}, "__name__": "numba.np.linalg"})
    reads_another_table.__module__ = "numba.np.linalg"
    assert not detached._carriable(reads_another_table, set())


def test_values_of_the_dispatch_other_than_pure_functions_are_not_carried():
    class Local:
        pass

    Local.__module__ = detached.DISPATCH + ".linalg._LAPACK"
    assert not detached._carriable(Local, set())
    assert not detached._carriable(Local(), set())
    assert not detached._carriable({"s": 1}, set())
    assert detached._carriable(("d", 2.0, None), set())


_TABLE = {"float64": "d"}
_SCALE = 2.0


def _reads_a_table(dtype):
    return _TABLE[dtype]


def _reads_a_function_and_a_constant(value):
    return abs(value) * _SCALE
