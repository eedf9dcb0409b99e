"""Large constants are kernel arguments: new data of the same shape reuses the kernel."""

from __future__ import annotations

import pickle

import numpy as np
import pytensor.tensor as pt
import pytest
from helpers import run_python, without_op_loads
from pytensor.graph.fg import FunctionGraph

from numba_cache.keys import current_fingerprint
from numba_cache.keys.constants import embedded_value
from numba_cache.keys.graph import describe_graph
from numba_cache.keys.kernels import graph_kernel_key

NEW_DATA = """
import json, os
import numpy as np, pytensor
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance
from numba_cache.evaluation.models import radon_model
model = radon_model(seed=int(os.environ["SEED"]))
reference = pytensor.function(model.inputs, model.outputs, mode="NUMBA")(*model.point)
with count_numba_compiles() as compiles:
    values = pytensor.function(model.inputs, model.outputs, mode="NUMBA_CACHE")(*model.point)
# Other generated code than NUMBA's (reductions may be vectorised differently): a ULP bound.
print(json.dumps({"compiles": len(compiles), "stats": dict(numba_cache.session_stats()),
                  "equal": max_ulp_distance(values, reference) <= NUMBA_ULP_BOUND}))
"""


def test_same_model_with_new_data_is_a_kernel_hit_with_the_new_results(tmp_path):
    env = {"PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'pytensor'}"}
    first = run_python(NEW_DATA, env | {"SEED": "0"})
    other = run_python(NEW_DATA, env | {"SEED": "1"})
    assert first["equal"] and other["equal"]
    # The new data answers rewriting's questions as the first did: rewriting and kernel reused.
    assert without_op_loads(other["stats"]) == {"rewrite.hit": 1, "graph.hit": 1}
    assert other["compiles"] == 0


def kernel_key(outputs, inputs):
    return graph_kernel_key(FunctionGraph(inputs, outputs, clone=True), current_fingerprint()).digest


def test_kernel_key_ignores_the_content_of_large_constants_but_not_their_shape():
    x = pt.vector("x")
    data = np.arange(100.0)
    base = kernel_key([x.sum() + pt.as_tensor(data)], [x])
    assert kernel_key([x.sum() + pt.as_tensor(data * 2)], [x]) == base
    assert kernel_key([x.sum() + pt.as_tensor(np.arange(101.0))], [x]) != base
    assert kernel_key([x.sum() + pt.as_tensor(data.astype("float32"))], [x]) != base


def test_content_key_still_sees_large_constants():
    x = pt.vector("x")

    def content(data):
        return describe_graph(FunctionGraph([x], [x.sum() + pt.as_tensor(data)], clone=True)).digest

    assert content(np.arange(100.0)) != content(np.arange(100.0) * 2)


def test_kernel_key_records_which_uses_share_an_argument():
    x = pt.vector("x")
    d1, d2 = pt.as_tensor(np.arange(100.0)), pt.as_tensor(np.arange(100.0) + 1)
    shared = kernel_key([x.sum() + d1, x.sum() * d1, x.sum() - d2], [x])
    separate = kernel_key([x.sum() + d1, x.sum() * d2, x.sum() - d2], [x])
    assert shared != separate


SWAPPED = """
import json, os
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
x = pt.scalar("x")
d1, d2 = np.arange(100.0), np.arange(100.0) * 10 + 1
first, second = (d1, d2) if os.environ["ORDER"] == "12" else (d2, d1)
# Built in another order too, so toposorts differ between the two processes.
if os.environ["ORDER"] == "12":
    a = x + pt.as_tensor(first); b = x * pt.as_tensor(second)
else:
    b = x * pt.as_tensor(second); a = x + pt.as_tensor(first)
values = pytensor.function([x], [a, b, a - b], mode="NUMBA_CACHE")(2.0)
expected = [2.0 + first, 2.0 * second, (2.0 + first) - 2.0 * second]
print(json.dumps({"equal": all(np.array_equal(v, e) for v, e in zip(values, expected)),
                  "stats": dict(numba_cache.session_stats())}))
"""


def test_hidden_arguments_follow_the_graph_structure_not_creation_order():
    cold = run_python(SWAPPED, {"ORDER": "12"})
    swapped = run_python(SWAPPED, {"ORDER": "21"})
    assert cold["equal"] and swapped["equal"]
    assert swapped["stats"]["graph.hit"] == 1


@pytest.mark.parametrize("array", [
    np.broadcast_to(np.zeros(1, dtype=np.int64), (0,)),  # PyTensor's empty core shape: stride 0
    np.arange(3.0)[:, None][:, :, None][:, 0],  # a (3, 1) view whose unit axis has stride 0
], ids=["empty", "unit-axis"])
def test_an_embedded_array_has_the_strides_of_its_unpickled_copy(array):
    restored = pickle.loads(pickle.dumps(array))
    assert array.strides != restored.strides  # the difference numba would write into code
    embedded = embedded_value(array)
    assert embedded.strides == embedded_value(restored).strides == restored.strides
    assert np.array_equal(embedded, array) and embedded.dtype == array.dtype


def test_an_array_embedded_as_it_is_is_not_copied():
    array = np.arange(6.0).reshape(2, 3)
    assert embedded_value(array) is array
    transposed = array.T  # not C-contiguous: numba types it by its own layout
    assert embedded_value(transposed) is transposed
