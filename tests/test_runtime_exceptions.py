"""A kernel that raises with values known only at run time raises the same exception,
type and message, in every process: compiled here, or loaded from the store.

numba builds such an exception's arguments with a function that reads the raising
function's environment. Its own cache leaves out the environments of functions
exec'd without a module (all of PyTensor's generated kernels), so a process that
loads the code finds a NULL environment and raises ``RuntimeError: Error creating
Python tuple from runtime exception arguments`` instead (PyTensor's built-in cache
does, in every warm process). numba_cache stores those environments too
(``numba_internals.reduce_compile_result``).
"""

from __future__ import annotations

import pytest
from helpers import run_python

RAISE_IN_KERNELS = """
import json, os, warnings
import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode

import numba_cache
from numba_cache.kernels.assembly import graph_body

graph_body.CALLS_PER_FUNCTION = int(os.environ.get("CALLS_PER_FUNCTION", "100"))
warnings.simplefilter("error")  # a store path that warns fails the compile, as in -W error
x, sizes = pt.vector("x"), pt.lvector("sizes")
cases = {
    # The message holds run-time values (a dynamic exception, PyTensor's generated code).
    "split sizes sum": (np.arange(5.0), np.array([1, 3])),
    # The message is a constant (a static exception), for contrast.
    "split sizes negative": (np.arange(5.0), np.array([6, -1])),
}
raised = {}
for mode in (Mode(linker="py", optimizer="fast_run"), "NUMBA_CACHE"):
    function = pytensor.function([x, sizes], pt.split(x, sizes, n_splits=2), mode=mode)
    for name, arguments in cases.items():
        try:
            function(*arguments)
            outcome = None
        except Exception as exc:
            outcome = [type(exc).__name__, str(exc)]
        raised.setdefault(name, []).append(outcome)
    works = function(np.arange(5.0), np.array([2, 3]))
print(json.dumps({"raised": raised, "works": [w.tolist() for w in works],
                  "stats": dict(numba_cache.session_stats())}))
"""


@pytest.mark.parametrize(("link_ops", "calls_per_function"),
                         [("0", "100"), ("0", "1"), ("1", "100")],
                         ids=["by-symbol", "by-symbol-split", "op-kernels-linked"])
def test_runtime_valued_exception_is_the_same_cold_and_warm(link_ops, calls_per_function):
    """Split (a function per call), the exception passes from its call's function through
    the graph kernel's, each returning it."""
    env = {"NBCACHE_LINK_OPS": link_ops, "CALLS_PER_FUNCTION": calls_per_function}
    cold = run_python(RAISE_IN_KERNELS, env=env)
    warm = run_python(RAISE_IN_KERNELS, env=env)
    assert warm["stats"].get("graph.hit") == 1 and "graph.miss" not in warm["stats"], warm["stats"]
    assert "graph.miss" in cold["stats"], cold["stats"]
    for run in (cold, warm):
        for name, (python_mode, numba_cache_mode) in run["raised"].items():
            assert python_mode is not None and python_mode[0] == "ValueError", (name, python_mode)
            assert numba_cache_mode == python_mode, (name, run["stats"])
        assert run["works"] == [[0.0, 1.0], [2.0, 3.0, 4.0]]
    assert warm["raised"]["split sizes sum"][1] == ["ValueError", "Split sizes sum to 4; expected 5"]



FAILING_CALLS = """
import json, os
import numpy as np
import pytensor
import pytensor.tensor as pt

import numba_cache
from numba_cache.kernels.assembly import graph_body

graph_body.CALLS_PER_FUNCTION = int(os.environ.get("CALLS_PER_FUNCTION", "100"))
shared_after = {}

def difference_and_gradient(mode):
    x, y = pt.vector("x"), pt.vector("y")
    function = pytensor.function([x, y], [x - y, *pytensor.grad((x - y).sum(), [x, y])],
                                 mode=mode)
    return lambda: function(np.ones(3), np.ones(2))

def updates(mode):
    a = pytensor.shared(np.arange(3.0), name="a")
    c = pytensor.shared(np.int64(0), name="c")
    x = pt.vector("x")
    function = pytensor.function([x], a + x, updates={a: a + x, c: c + 1}, mode=mode)
    function(np.ones(3))
    def call():
        try:
            function(np.ones(4))
        finally:
            shared_after[mode] = [a.get_value().tolist(), int(c.get_value())]
    return call

outcomes = {}
for mode in ("NUMBA", "NUMBA_CACHE"):
    for case in (difference_and_gradient, updates):
        call = case(mode)
        try:
            call()
            outcome = None
        except Exception as exc:
            outcome = [type(exc).__name__, str(exc).splitlines()[0]]
        outcomes.setdefault(case.__name__, []).append(outcome)
print(json.dumps({"outcomes": outcomes, "shared_after": shared_after,
                  "stats": dict(numba_cache.session_stats())}))
"""


@pytest.mark.parametrize("calls_per_function", ["100", "1"], ids=["one-function", "split"])
def test_a_failing_call_fails_where_numbas_does_cold_and_warm(calls_per_function):
    """Two checks fail in the first case: the first to run names the exception (NUMBA
    runs the gradient's broadcast Assert first). In the second, NUMBA has run the
    inplace update of `c` when the addition fails. The kernel runs its nodes in
    NUMBA's order, in a process that rewrote the graph and in one that restored it;
    split (a function per call), the failing call's function returns the error to the
    graph kernel's, which returns it."""
    cold, warm = (run_python(FAILING_CALLS, env={"CALLS_PER_FUNCTION": calls_per_function})
                  for _ in range(2))
    assert "rewrite.miss" in cold["stats"] and "graph.miss" in cold["stats"], cold["stats"]
    assert warm["stats"].get("rewrite.hit") == 2 and warm["stats"].get("graph.hit") == 2, \
        warm["stats"]
    for run in (cold, warm):
        numba, ours = run["outcomes"]["difference_and_gradient"]
        assert numba[0] == "AssertionError", numba
        assert ours == numba
        numba, ours = run["outcomes"]["updates"]
        assert numba[0] == "ValueError", numba
        assert ours == numba
        assert run["shared_after"]["NUMBA"] == [[1.0, 2.0, 3.0], 2]
        assert run["shared_after"]["NUMBA_CACHE"] == run["shared_after"]["NUMBA"]
