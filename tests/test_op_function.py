"""An op kernel compiles PyTensor's implementation itself where it is a plain ``numba.njit``
function of the node's inputs (numba_cache/kernels/assembly/op_function.py); anything else is
called from a generated wrapper, as before.

Compiled itself, the kernel keeps the implementation's options (PyTensor's fastmath set),
names numba_cache's generated module (a warm process loading it imports nothing of
PyTensor's dispatch: ``tests/test_detached.py``, slow), and numba compiles its code once:
no wrapper's compile event. The results are a fresh process's bits, cold or warm, and
within the stated ULP bound of ``NUMBA``'s.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from helpers import run_python
from numba.core.compiler import Compiler

from numba_cache.codegen.sources import kernel_source
from numba_cache.kernels.assembly.op_function import op_function, takes_inputs

PYTENSOR_FASTMATH = {"arcp", "contract", "afn", "reassoc", "nsz"}


def _plain(a, b):
    return a + b


def test_a_plain_implementation_of_the_inputs_is_compiled_itself_with_its_own_options():
    impl = numba.njit(_plain, fastmath=PYTENSOR_FASTMATH, error_model="numpy")
    made = op_function(impl, 2, "Add_0123", "<label>")
    assert made.function.__code__ is _plain.__code__
    assert made.function.__module__ == "numba_cache.codegen.generated"
    assert _plain.__module__ == __name__  # the implementation itself is left as it was
    assert made.targetoptions == impl.targetoptions
    assert made.targetoptions["fastmath"] == PYTENSOR_FASTMATH
    assert made.targetoptions["error_model"] == "numpy"
    assert "def _plain(a, b):" in made.source and "compiled itself" in made.source

    dispatcher = made.dispatcher(cache=_NoCache(), fastmath=False)
    assert dispatcher.targetoptions["fastmath"] == PYTENSOR_FASTMATH  # not the flag given
    assert dispatcher.targetoptions["no_cpython_wrapper"]  # only kernels call it


def _with_default(a, b=1.0):
    return a + b


def _star(*inputs):
    return inputs[0]


def _keyword_only(a, *, b):
    return a + b


class _OtherPipeline(Compiler):
    pass


@pytest.mark.parametrize("impl, n_inputs", [
    pytest.param(numba.njit(_plain), 3, id="other-number-of-inputs"),
    pytest.param(numba.njit(_with_default), 2, id="defaults"),
    pytest.param(numba.njit(_star), 2, id="star-args"),
    pytest.param(numba.njit(_keyword_only), 1, id="keyword-only"),
    pytest.param(_plain, 2, id="a-python-function"),  # as PyTensor's @overload'ed ones
    pytest.param(numba.njit(_plain, pipeline_class=_OtherPipeline), 2, id="another-compiler"),
])
def test_any_other_implementation_is_called_from_a_generated_wrapper(impl, n_inputs):
    made = op_function(impl, n_inputs, "Op_0123", "<label>")
    assert made.source == kernel_source("Op_0123", n_inputs)
    assert made.targetoptions is None
    assert made.function.__globals__["impl"] is impl


def test_takes_inputs_counts_positional_parameters_only():
    assert takes_inputs(_plain, 2)
    assert not takes_inputs(_plain, 1)
    assert not takes_inputs(_with_default, 2)
    assert not takes_inputs(_star, 1)
    assert not takes_inputs(_keyword_only, 1)
    assert not takes_inputs(len, 1)  # no Python code to compile


class _NoCache:
    """Stands for a kernel cache where only the dispatcher's construction is tested."""


GRAPH = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles

x = pt.matrix("x", shape=(3, 4))
y = pt.matrix("y", shape=(3, 4))
# DimShuffle, Subtensor and CAReduce convert to plain numba.njit functions; Join's takes *args.
stacked = pt.concatenate([x.T[1:], y.T[::-1]], axis=0)
outputs = [stacked.sum(axis=0), stacked.max(axis=1)]
point = [np.linspace(-2.0, 3.0, 12).reshape(3, 4) ** 3, np.cos(np.arange(12.0)).reshape(3, 4)]
with count_numba_compiles() as names:
    values = pytensor.function([x, y], outputs, mode="NUMBA_CACHE")(*point)
numba_values = pytensor.function([x, y], outputs, mode="NUMBA")(*point)
print(json.dumps({
    "compiled": names,
    "bits": [np.asarray(v).tobytes().hex() for v in values],
    "values": [np.asarray(v).tolist() for v in values],
    "numba_values": [np.asarray(v).tolist() for v in numba_values],
    "stats": dict(numba_cache.session_stats()),
}))
"""


@pytest.mark.slow  # fresh processes compiling a graph: the slow tier, which CI runs
def test_a_graph_compiles_each_plain_implementation_once_and_a_warm_process_gets_its_bits():
    from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance

    cold = run_python(GRAPH)
    wrappers = {name.split("_")[0] for name in cold["compiled"] if name[0].isupper()}
    assert wrappers == {"Join"}, cold["compiled"]
    plain = [name for name in cold["compiled"]
             if name.startswith(("numba_funcify_DimShuffle", "numba_funcify_Subtensor"))]
    assert plain and len(plain) == len(set(plain)), cold["compiled"]  # each compiled once
    assert cold["stats"].get("op.miss", 0) >= 4, cold["stats"]
    assert max_ulp_distance([np.array(v) for v in cold["values"]],
                            [np.array(v) for v in cold["numba_values"]]) <= NUMBA_ULP_BOUND

    warm = run_python(GRAPH)
    assert warm["compiled"] == [] and "op.miss" not in warm["stats"], warm["stats"]
    assert warm["bits"] == cold["bits"]
