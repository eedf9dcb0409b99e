"""Compiles made while test doubles stand in for numba's compiler are PyTensor's own.

PyTensor's test helper ``compare_numba_and_py`` compiles each graph a second time
with ``numba.njit``, PyTensor's ``numba_njit`` and numba's ``from_dtype`` replaced
(``eval_python_only`` in PyTensor's ``tests/link/numba/test_basic.py``), so that
``NumbaLinker`` runs the graph's Python code. Run through numba_cache, 90 of
PyTensor's numba tests failed that way: the compile under the doubles failed,
what it had kept poisoned the compiles after it, and the self-test, run under the
doubles, turned the cache off for the whole process.
"""

from __future__ import annotations

import pytest
from helpers import run_python

CHILD = """
import json, warnings
from unittest import mock
import numpy as np
import numba, pytensor, pytensor.tensor as pt
import pytensor.link.numba.dispatch.basic  # imported first, as PyTensor's tests import it
import numba_cache


def returns_the_function(*args, **kwargs):
    def jit(function):
        function.py_func = function
        return function
    return jit(args[0]) if len(args) == 1 and callable(args[0]) else jit


DOUBLES = [
    mock.patch("numba.njit", returns_the_function),
    mock.patch("numba.vectorize", returns_the_function),
    mock.patch("pytensor.link.numba.dispatch.basic.numba_njit", returns_the_function),
    mock.patch("pytensor.link.numba.dispatch.basic.direct_cast", lambda x, dtype: x),
    mock.patch("numba.np.numpy_support.from_dtype", lambda dtype: dtype),
]

x = pt.matrix("x")
y = pt.vector("y")
outputs = [pt.max(x + 1.0, axis=0), pt.exp(y).sum() * 2]
values = [np.arange(6.0).reshape(3, 2), np.linspace(0, 1, 4)]


def compile_and_run():
    function = pytensor.function([x, y], outputs, mode="NUMBA_CACHE")
    return [np.asarray(out).tolist() for out in function(*values)]


report = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for double in DOUBLES:
        double.start()
    try:
        report["under_doubles"] = compile_and_run()
        report["stats_under_doubles"] = dict(numba_cache.session_stats())
    finally:
        for double in DOUBLES:
            double.stop()
    report["after"] = compile_and_run()
report["warnings"] = [str(w.message) for w in caught if "numba_cache" in str(w.message)]
report["stats"] = dict(numba_cache.session_stats())
report["expected"] = [np.max(values[0] + 1.0, axis=0).tolist(), float(np.exp(values[1]).sum() * 2)]
print(json.dumps(report))
"""

WARM = """
import json
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
x = pt.matrix("x")
y = pt.vector("y")
function = pytensor.function([x, y], [pt.max(x + 1.0, axis=0), pt.exp(y).sum() * 2],
                             mode="NUMBA_CACHE")
out = function(np.arange(6.0).reshape(3, 2), np.linspace(0, 1, 4))
print(json.dumps({"result": [np.asarray(o).tolist() for o in out],
                  "stats": dict(numba_cache.session_stats())}))
"""


def test_under_doubles_pytensor_links_and_the_cache_is_untouched(private_store):
    result = run_python(CHILD)
    assert result["under_doubles"] == result["expected"]  # PyTensor's Python code ran
    assert result["stats_under_doubles"] == {}, "numba_cache looked something up under the doubles"
    assert result["warnings"] == [], "the doubles were taken for a numba whose internals moved"
    # Without the doubles, the same graph is compiled by numba_cache, nothing kept from before.
    assert result["after"][0] == result["expected"][0]
    assert result["after"][1] == pytest.approx(result["expected"][1], rel=1e-13)  # numba's exp
    assert result["stats"].get("graph.miss") == 1 and result["stats"].get("op.miss", 0) >= 2, \
        result["stats"]
    warm = run_python(WARM)
    assert warm["result"] == result["after"]
    assert warm["stats"].get("graph.hit") == 1 and "graph.miss" not in warm["stats"], warm["stats"]
