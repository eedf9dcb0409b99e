"""CSR and CSC kernels never stand in for each other (issue 20).

``x * y`` with ``x`` sparse and ``y`` dense, as in PyTensor's own
``tests/link/numba/sparse/test_math.py::test_sparse_dense_multiply``: the kernel
PyTensor generates depends on the sparse format, which is a prop of the type.
Through ``NUMBA_CACHE`` each must give the built-in ``NUMBA`` mode's values, in
one process after the other format ran, and in fresh processes cold and warm.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_python

from numba_cache import settings

CASES = [(y_ndim, sparse_format) for sparse_format in ("csr", "csc") for y_ndim in (0, 1, 2)]

MULTIPLY = """
import numpy as np, pytensor, scipy.sparse
import pytensor.sparse as ps, pytensor.tensor as pt

def sparse_dense_multiply(y_ndim, sparse_format):
    x = ps.matrix(sparse_format, name="x", shape=(3, 3))
    y = pt.tensor("y", shape=(3,) * y_ndim)
    rng = np.random.default_rng((155, y_ndim, sparse_format == "csr"))
    x_value = scipy.sparse.random(3, 3, density=0.5, format=sparse_format, random_state=rng)
    y_value = rng.normal(size=(3,) * y_ndim)
    return [x, y], x * y, [x_value, y_value]

def evaluate(y_ndim, sparse_format, mode):
    inputs, output, values = sparse_dense_multiply(y_ndim, sparse_format)
    result = pytensor.function(inputs, output, mode=mode)(*values)
    assert result.format == sparse_format, (result.format, sparse_format)
    return result.toarray()
"""

namespace: dict = {}
exec(MULTIPLY, namespace)
evaluate = namespace["evaluate"]


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    """One store for the six cases, so CSC runs after CSR in the same store and process."""
    return tmp_path_factory.mktemp("sparse_store")


@pytest.mark.parametrize(("y_ndim", "sparse_format"), CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_sparse_dense_multiply(y_ndim, sparse_format, shared_store):
    settings.configure(root=shared_store)
    expected = evaluate(y_ndim, sparse_format, "NUMBA")
    np.testing.assert_allclose(evaluate(y_ndim, sparse_format, "NUMBA_CACHE"), expected)


FRESH_PROCESS = MULTIPLY + """
import json, sys
import numba_cache
results = {f"{n}-{f}": evaluate(n, f, "NUMBA_CACHE").tolist() for n, f in json.loads(sys.argv[1])}
print(json.dumps({"results": results, "stats": dict(numba_cache.session_stats())}))
"""


def test_fresh_processes_cold_and_warm_give_the_builtin_values():
    """Only NUMBA_CACHE in the children: the sparse types must be known to numba on a hit too."""
    expected = {f"{n}-{f}": evaluate(n, f, "NUMBA") for n, f in CASES}
    code = FRESH_PROCESS.replace("sys.argv[1]", repr(json.dumps(CASES)))
    cold = run_python(code)
    warm = run_python(code)
    for run in (cold, warm):
        for case, values in expected.items():
            np.testing.assert_allclose(np.array(run["results"][case]), values, err_msg=case)
    assert cold["stats"]["graph.miss"] == len(CASES)
    assert warm["stats"].get("graph.hit") == len(CASES)
    assert not any(name.endswith(".miss") for name in warm["stats"]), warm["stats"]
    # The six graphs are three op kernels per format, not one shared by both formats.
    assert cold["stats"]["op.miss"] == len(CASES)

