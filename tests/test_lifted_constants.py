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

from numba_cache.codegen.lifted_constants import lifted, trailing_constants
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


def _lifted(node):
    trailing = trailing_constants(node)
    assert trailing, "nothing lifted"
    replacement = lifted(node, trailing)
    assert replacement is not None and list(replacement.inputs[len(node.inputs):]) == list(trailing)
    return replacement


def test_only_constants_of_additions_and_multiplications_are_lifted():
    node = _scalar_composite_node()
    replacement = _lifted(node)
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
    replacement = _lifted(node)
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
    replacement = _lifted(node)
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
    assert trailing_constants(make()) == ()


def test_the_constants_are_found_in_the_same_order_in_every_process(private_store):
    """Their order names them in a graph's source, which another process must reproduce."""
    code = """
import json
import pytensor.scalar as ps
from numba_cache.codegen.lifted_constants import trailing_constants
x, y = ps.float64("x"), ps.float64("y")
outputs = [x * ps.constant(0.25) + ps.constant(3.5) - y * ps.constant(-0.75),
           y * ps.constant(0.125) + x * ps.constant(9.5)]
node = ps.Composite([x, y], outputs).make_node(ps.float64("a"), ps.float64("b"))
print(json.dumps({"order": [float(constant.data) for constant in trailing_constants(node)]}))
"""
    orders = {tuple(run_python(code, env={"PYTHONHASHSEED": str(seed)})["order"])
              for seed in (1, 2, 3)}
    assert len(orders) == 1 and sorted(next(iter(orders))) == [-0.75, 0.125, 0.25, 3.5, 9.5]


def _graph(expression):
    """A graph of one ``Elemwise`` of a ``Composite`` computing ``expression(a, b)`` on
    scalars, on two vectors (and its graph key)."""
    from pytensor.graph.fg import FunctionGraph

    from numba_cache.keys.fingerprint import current_fingerprint
    from numba_cache.keys.kernels import graph_kernel_key

    a, b = ps.float64("a"), ps.float64("b")
    x, y = pt.dvector("x"), pt.dvector("y")
    fgraph = FunctionGraph([x, y], [Elemwise(ps.Composite([a, b], [expression(a, b)]))(x, y)])
    return fgraph, graph_kernel_key(fgraph, current_fingerprint()).digest


def test_graph_keys_describe_lifted_constants_by_type_and_position_not_value():
    from numba_cache.keys.graph import describe_graph

    def scaled(scale, shift, exponent=2.0):
        return lambda a, b: (a * ps.constant(scale) + ps.constant(shift)) ** ps.constant(exponent) - b

    first, key = _graph(scaled(0.5, 918.0))
    second, same = _graph(scaled(0.25, -3.0))
    assert key == same  # only lifted values differ: the kernel serves both
    assert describe_graph(first, hide_constants=True).digest != \
           describe_graph(second, hide_constants=True).digest  # what rewriting reads keeps them
    assert _graph(scaled(0.5, 918.0, exponent=3.0))[1] != key  # a baked constant's value
    assert _graph(scaled(0.5, 918.0, exponent=2.0))[1] == key
    assert _graph(lambda a, b: (a * ps.constant(0.5) + ps.constant(918.0)) ** ps.constant(2.0)
                  + b)[1] != key  # the structure around them


def test_one_constant_read_twice_and_two_constants_give_other_graph_keys():
    """One constant object read twice is one lifted argument, two objects are two, even of
    equal values (how a graph was built decides, and PyTensor may hand out a frozen
    graph equal to one built before): the keys tell the two kernels apart."""
    shared = ps.constant(0.75)
    one, key_one = _graph(lambda a, b: a * shared + b * shared)
    two, key_two = _graph(lambda a, b: a * ps.constant(0.625) + b * ps.constant(0.625))
    [node_one], [node_two] = one.apply_nodes, two.apply_nodes
    assert (len(trailing_constants(node_one)), len(trailing_constants(node_two))) == (1, 2)
    assert key_one != key_two
    assert _graph(lambda a, b: a * ps.constant(3.0) + b * ps.constant(-1.0))[1] == key_two


def test_a_constant_a_nested_composite_bakes_keeps_its_value_in_the_graph_key():
    """PyTensor interns frozen nodes with their constants: ``x * c`` in a nested Composite
    is the very node ``a * c`` of the outer graph, whose kernel takes c as an argument.
    The nested one bakes it: other values are other kernels."""
    def nested(value):
        def expression(a, b):
            x = ps.float64("x")
            inner = ps.Composite([x], [(x * ps.constant(value)) ** ps.constant(3.0)])
            return a * ps.constant(value) + inner(a) - b
        return expression

    first, key = _graph(nested(0.375))
    [node] = first.apply_nodes
    composite = node.op.scalar_op
    [inner] = [inner.op for inner in composite.fgraph.apply_nodes
               if isinstance(inner.op, ps.Composite)]
    [lifted] = [constant for constant in trailing_constants(node)]
    assert float(lifted.data.ravel()[0]) == 0.375
    constants = [{id(variable) for inner_node in graph.apply_nodes for variable in inner_node.inputs
                  if isinstance(variable, ps.ScalarConstant) and variable.data == 0.375}
                 for graph in (composite.fgraph, inner.fgraph)]
    assert constants[0] & constants[1], "the two graphs no longer share the constant object"
    assert _graph(nested(0.625))[1] != key


VARIANT = """
import json
import numpy as np
import pytensor
import numba_cache
import numba_cache.kernels.assembly.graph_kernel as graph_kernels
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.evaluation.models import radon_model

built = []
build = graph_kernels.lifted
graph_kernels.lifted = lambda node, trailing: built.append(node) or (None if {fail!r} else build(node, trailing))
model = radon_model(**{kwargs!r})
with count_numba_compiles() as compiles:
    function = pytensor.function(model.inputs, model.outputs, mode={mode!r})
    values = function(*model.point)
print(json.dumps({{"compiles": compiles, "stats": dict(numba_cache.session_stats()),
                  "built": len(built), "values": [np.asarray(value).tolist() for value in values]}}))
"""


def compile_radon(kwargs: dict, mode: str = "NUMBA_CACHE", fail: bool = False,
                  env: dict | None = None) -> dict:
    """Radon compiled and run in a fresh process; with `fail`, as if PyTensor would build
    no node taking lifted constants."""
    return run_python(VARIANT.format(kwargs=kwargs, mode=mode, fail=fail), env)


def _assert_near_numba(kwargs: dict, values: list) -> None:
    reference = compile_radon(kwargs, mode="NUMBA")
    assert max_ulp_distance([np.asarray(value) for value in values],
                            [np.asarray(value) for value in reference["values"]]) <= NUMBA_ULP_BOUND


@pytest.mark.parametrize("kwargs", [{"prior_scale": 2.5}, {"prior_scale": 2.5, "extra_term": True}],
                         ids=["prior scale", "prior scale, extra term"])
def test_a_variant_of_changed_prior_constants_is_a_graph_kernel_hit(private_store, tmp_path,
                                                                    kwargs):
    """The graph kernel passes lifted constants from a pack, so a model whose prior scale
    changed finds the graph kernel of the same model compiled before, compiles nothing,
    and gives the bits of the variant compiled cold in a store of its own."""
    base = {key: value for key, value in kwargs.items() if key != "prior_scale"}
    compile_radon(base)
    variant = compile_radon(kwargs)
    assert variant["stats"]["graph.hit"] == 1 and variant["compiles"] == []
    assert variant["built"] == 0
    alone = compile_radon(kwargs, env={"NBCACHE_DIR": str(tmp_path / "alone")})
    assert alone["stats"]["graph.miss"] == 1
    assert variant["values"] == alone["values"]
    assert variant["values"] != compile_radon(base)["values"]
    _assert_near_numba(kwargs, variant["values"])


def test_a_dataset_of_other_sizes_compiles_nothing(private_store, tmp_path):
    """Its graph key is another (static lengths differ), but the sizes reach its fused
    kernels as lifted constants and its graph function in a pack: the graph function of
    the first dataset serves it, found by its code (tests/test_code_keys.py) without
    converting an op (tests/test_remembered_op_keys.py), with the bits of the same
    model compiled cold in a store of its own."""
    kwargs = {"groups": 12, "observations": 150}
    compile_radon({})
    served = compile_radon(kwargs)
    assert served["stats"]["graph_by_code.hit"] == 1 and served["stats"].get("op.miss", 0) == 0
    assert served["stats"]["op_keys.remembered"] == 1 and served["compiles"] == []
    warm = compile_radon(kwargs)
    assert warm["stats"]["graph.hit"] == 1 and warm["values"] == served["values"]
    assert served["built"] == warm["built"] == 0  # nothing converted: no lifted node built
    alone = compile_radon(kwargs, env={"NBCACHE_DIR": str(tmp_path / "alone")})
    assert alone["stats"]["graph.miss"] == 1 and served["values"] == alone["values"]
    _assert_near_numba(kwargs, served["values"])


def test_a_node_pytensor_will_not_lift_is_computed_baked_and_its_graph_not_stored(private_store):
    failed = compile_radon({}, fail=True)
    assert failed["built"] > 0 and failed["stats"]["graph.miss"] == 1
    assert failed["stats"]["uncacheable:contains-uncacheable"] == 1
    reference = compile_radon({}, mode="NUMBA")
    assert max_ulp_distance([np.asarray(value) for value in failed["values"]],
                            [np.asarray(value) for value in reference["values"]]) <= NUMBA_ULP_BOUND
    again = compile_radon({})  # the graph is compiled again, not served code its source does not say
    assert "graph.hit" not in again["stats"]
    assert max_ulp_distance([np.asarray(value) for value in again["values"]],
                            [np.asarray(value) for value in reference["values"]]) <= NUMBA_ULP_BOUND
