"""Fused kernels take their additive and multiplicative constants as arguments.

A variant of a model whose constants changed (a prior's scale, a dataset's size)
finds its fused op kernels in the store (numba_cache/codegen/lifted_constants.py).
The unit tests check which constants are lifted and that a lifted node computes
what the original does (PyTensor's Python implementation, bit for bit); the end to
end test compiles a variant in fresh processes: no op kernel compiled, the same
bits cold and warm, PyTensor's ``NUMBA`` within ``NUMBA_ULP_BOUND``.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from helpers import run_python
from pytensor.tensor.elemwise import Elemwise

from numba_cache.codegen.lifted_constants import lifted
from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, max_ulp_distance


def _scalar_composite_node():
    """``(x * 0.2 + 918.0 - y * -0.5, x ** 2.5 / 3.0 + (x < 1.5))``: 0.2, 918.0 and -0.5
    are read by mul, add and sub; 2.5, 3.0 and 1.5 by pow, true_div and lt."""
    x, y = ps.float64("x"), ps.float64("y")
    first = x * ps.constant(0.2) + ps.constant(918.0) - y * ps.constant(-0.5)
    second = (x ** ps.constant(2.5)) / ps.constant(3.0) + ps.cast(x < ps.constant(1.5), "float64")
    composite = ps.Composite([x, y], [first, second])
    return composite.make_node(ps.float64("a"), ps.float64("b"))


def _values(node, inputs, point):
    function = pytensor.function(inputs, node.outputs, mode="FAST_COMPILE")
    return [np.asarray(value) for value in function(*point)]


def test_only_constants_of_additions_and_multiplications_are_lifted():
    node = _scalar_composite_node()
    replacement = lifted(node)
    assert replacement is not node
    assert replacement.inputs[:2] == node.inputs
    assert sorted(float(constant.data) for constant in replacement.inputs[2:]) == [-0.5, 0.2, 918.0]
    inner_constants = {float(variable.data) for variable in replacement.op.fgraph.variables
                       if isinstance(variable, ps.ScalarConstant)}
    assert inner_constants == {1.5, 2.5, 3.0}
    point = [0.7, -1.3]
    assert [value.tobytes() for value in _values(replacement, node.inputs, point)] == \
           [value.tobytes() for value in _values(node, node.inputs, point)]


def test_an_elemwise_gets_its_constants_as_broadcastable_tensors():
    x = pt.dmatrix("x")
    composite = _scalar_composite_node().op
    node = Elemwise(composite).make_node(x, x.T)
    replacement = lifted(node)
    assert [output.type for output in replacement.outputs] == [output.type for output in node.outputs]
    assert all(constant.type.shape == (1, 1) for constant in replacement.inputs[2:])
    point = [np.linspace(-2.0, 2.0, 9).reshape(3, 3)]
    assert [value.tobytes() for value in _values(replacement, [x], point)] == \
           [value.tobytes() for value in _values(node, [x], point)]


def test_a_fused_reduction_gets_its_constants_as_native_scalars():
    """PyTensor's FusedElemwise (here an elemwise fused with its sum), as its rewrites make it."""
    x = pt.dvector("x")
    function = pytensor.function([x], (-0.5 * (x * 0.2) ** 2 - 6.89 + x * 0.33).sum(), mode="NUMBA")
    [fused] = [node for node in function.maker.fgraph.apply_nodes
               if type(node.op).__name__ == "FusedElemwise"]
    inputs = [variable.type() for variable in fused.inputs]
    node = fused.op.make_node(*inputs)
    replacement = lifted(node)
    assert type(replacement.op) is type(node.op)
    assert replacement.inputs[:len(inputs)] == node.inputs
    assert sorted(float(constant.data) for constant in replacement.inputs[len(inputs):]) == \
           [-6.89, -0.5, 0.2, 0.33]
    assert all(isinstance(constant.type, ps.ScalarType)
               for constant in replacement.inputs[len(inputs):])
    point = [np.linspace(-2.0, 2.0, 7)]
    assert [value.tobytes() for value in _values(replacement, inputs, point)] == \
           [value.tobytes() for value in _values(node, inputs, point)]


@pytest.mark.parametrize("make", [
    lambda: pt.exp(pt.dvector("x")).owner,  # no Composite
    lambda: ps.Composite([a := ps.float64("a")], [a ** ps.constant(2.5)]).make_node(a),
    lambda: ps.Composite([a := ps.int64("a")], [a * ps.constant(3, dtype="int64")]).make_node(a),
], ids=["exp", "exponent only", "integer"])
def test_nodes_with_nothing_to_lift_are_their_own_kernels(make):
    node = make()
    assert lifted(node) is node


VARIANT = """
import json
import numpy as np
import pytensor
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.evaluation.models import radon_model

model = radon_model(**{kwargs!r})
with count_numba_compiles() as compiles:
    function = pytensor.function(model.inputs, model.outputs, mode={mode!r})
    values = function(*model.point)
print(json.dumps({{"compiles": compiles, "stats": dict(numba_cache.session_stats()),
                  "values": [np.asarray(value).tolist() for value in values]}}))
"""


def compile_radon(kwargs: dict, mode: str = "NUMBA_CACHE") -> dict:
    return run_python(VARIANT.format(kwargs=kwargs, mode=mode))


@pytest.mark.parametrize("kwargs", [{"prior_scale": 2.5}, {"groups": 12, "observations": 150}],
                         ids=["prior scale", "dataset sizes"])
def test_a_variant_of_changed_constants_compiles_no_op_kernel(private_store, kwargs):
    compile_radon({})
    cold = compile_radon(kwargs)
    assert cold["stats"]["graph.miss"] == 1 and cold["stats"].get("op.miss", 0) == 0
    assert [name.split("_")[0] for name in cold["compiles"]] == ["graph"]
    warm = compile_radon(kwargs)
    assert warm["stats"]["graph.hit"] == 1 and warm["values"] == cold["values"]
    reference = compile_radon(kwargs, mode="NUMBA")
    assert max_ulp_distance([np.asarray(value) for value in cold["values"]],
                            [np.asarray(value) for value in reference["values"]]) <= NUMBA_ULP_BOUND
