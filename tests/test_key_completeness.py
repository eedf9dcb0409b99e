"""Key completeness: whatever could change a kernel's code changes its key (issue 20).

One prop or type attribute is varied at a time, over the op families PyTensor's
numba dispatch registers and the types they take (dense, sparse CSR/CSC,
scalar, random generator, typed list, xtensor). The op key and the graph key
must both change, except where the generated code is proven the same: a plain
``TensorType``'s static lengths other than 1 (numba compiles per dtype, rank and
layout; PyTensor's dispatch contract puts any length it reads in its own key).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

import numpy as np
import pytensor.sparse as ps
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.compile.ops import deep_copy_op
from pytensor.graph.basic import Apply, Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.type import Type
from pytensor.scalar import ScalarType
from pytensor.sparse.type import SparseTensorType
from pytensor.tensor.random.type import RandomGeneratorType
from pytensor.tensor.type import TensorType
from pytensor.typed_list.type import TypedListType
from pytensor.xtensor.random.type import XRandomGeneratorType
from pytensor.xtensor.type import XTensorType

from numba_cache.keys.fingerprint import current_fingerprint
from numba_cache.keys.graph import describe_op
from numba_cache.keys.kernels import graph_kernel_key, op_kernel_key

FINGERPRINT = current_fingerprint()


def keys_of(node: Apply, op: Op | None = None) -> tuple[str, str]:
    """The op key and the graph key of `node` (with `op` instead of its own) alone,
    on fresh inputs of its input types."""
    inputs = [v if isinstance(v, Constant) else v.type() for v in node.inputs]
    outputs = [v.type() for v in node.outputs]
    alone = Apply(node.op if op is None else op, inputs, outputs)
    fgraph = FunctionGraph([v for v in inputs if not isinstance(v, Constant)], outputs, clone=False)
    op_key = op_kernel_key(alone, "pytensor-key", FINGERPRINT).digest
    return op_key, graph_kernel_key(fgraph, FINGERPRINT).digest


def copy_keys(pytensor_type) -> tuple[str, str]:
    """Keys of a ``DeepCopyOp`` node (numba dispatch registers it for every type)."""
    return keys_of(deep_copy_op.make_node(pytensor_type()))


# Each case: a base type and its variants, one attribute changed, with whether
# the op key may stay the same (proven same code); the graph key must change always.
DENSE = TensorType("float64", shape=(5, None))
CSR = SparseTensorType("csr", "float64", shape=(3, 3))
CSC = SparseTensorType("csc", "float64", shape=(3, 3))
FLOAT_LIST = TypedListType(TensorType("float64", shape=(None,)))
X_VECTOR = XTensorType("float64", dims=("a",), shape=(None,))

TYPE_VARIANTS = {
    "dense-dtype": (DENSE, DENSE.clone(dtype="float32"), False),
    "dense-known-one": (DENSE, DENSE.clone(shape=(1, None)), False),
    "dense-rank": (DENSE, TensorType("float64", shape=(5, None, None)), False),
    "dense-static-length": (DENSE, DENSE.clone(shape=(7, None)), True),
    "dense-to-sparse": (TensorType("float64", shape=(3, 3)), CSR, False),
    "csr-format": (CSR, CSC, False),
    "csc-format": (CSC, CSR, False),
    "csr-dtype": (CSR, CSR.clone(dtype="float32"), False),
    "csc-dtype": (CSC, CSC.clone(dtype="int64"), False),
    # Not proven the same for sparse: described in full, a length is a miss.
    "csr-static-length": (CSR, CSR.clone(shape=(4, 3)), False),
    "csc-unknown-length": (CSC, CSC.clone(shape=(None, 3)), False),
    "scalar-dtype": (ScalarType("float64"), ScalarType("float32"), False),
    "scalar-to-tensor": (ScalarType("float64"), TensorType("float64", shape=()), False),
    "random-generator-class": (RandomGeneratorType(), XRandomGeneratorType(), False),
    "typed-list-element-dtype": (FLOAT_LIST, TypedListType(TensorType("float32", shape=(None,))), False),
    "typed-list-element-length": (FLOAT_LIST, TypedListType(TensorType("float64", shape=(5,))), False),
    "typed-list-depth": (FLOAT_LIST, TypedListType(TensorType("float64", shape=(None,)), depth=1), False),
    "xtensor-dims": (X_VECTOR, XTensorType("float64", dims=("b",), shape=(None,)), False),
    "xtensor-dtype": (X_VECTOR, XTensorType("float32", dims=("a",), shape=(None,)), False),
    "xtensor-length": (X_VECTOR, XTensorType("float64", dims=("a",), shape=(3,)), False),
}


@pytest.mark.parametrize("case", sorted(TYPE_VARIANTS))
def test_a_changed_type_changes_the_keys(case):
    base, variant, proven_same_code = TYPE_VARIANTS[case]
    base_op, base_graph = copy_keys(base)
    variant_op, variant_graph = copy_keys(variant)
    assert base_graph != variant_graph
    if proven_same_code:
        assert base_op == variant_op
    else:
        assert base_op != variant_op


@pytest.mark.parametrize("y_ndim", [0, 1, 2])
def test_sparse_dense_multiply_keys_differ_by_format(y_ndim):
    """The issue's instance, on the real op: ``MultiplySparseDense`` reads the output format."""
    y = pt.tensor("y", shape=(3,) * y_ndim)
    csr_node = (ps.matrix("csr", shape=(3, 3)) * y).owner
    csc_node = (ps.matrix("csc", shape=(3, 3)) * y).owner
    assert type(csr_node.op) is type(csc_node.op)
    assert keys_of(csr_node)[0] != keys_of(csc_node)[0]
    assert keys_of(csr_node)[1] != keys_of(csc_node)[1]


# --- every prop of every op in the families' rewritten graphs -----------------


def _sparse_family():
    x, y = ps.matrix("csr", name="x", shape=(3, 3)), pt.matrix("y", shape=(3, 3))
    z = ps.matrix("csc", name="z")
    return [x, y, z], [x * y, ps.structured_dot(x, y), ps.dense_from_sparse(z) + 1], None, None


def _typed_list_family():
    from pytensor.typed_list import make_list
    from pytensor.typed_list.basic import append, length

    x = pt.vector("x")
    listed = append(make_list([x, x * 2]), x)
    return [x], [length(listed), listed[1]], None, None


def _xtensor_family():
    import pytensor.xtensor as px

    a = px.xtensor("a", dims=("i", "j"), shape=(None, 3))
    return [a], [px.math.exp(a).sum("i")], None, None


def family_ops() -> dict:
    """One instance of each op class in the rewritten family graphs, by class name."""
    from graph_families import FAMILIES
    from pytensor.graph.traversal import graph_inputs

    from numba_cache import numba_cache_mode

    families = [*FAMILIES.values(), _sparse_family, _typed_list_family, _xtensor_family]
    ops: dict = {}
    for family in families:
        _, outputs, _, _ = family()
        inputs = [v for v in graph_inputs(outputs) if not isinstance(v, Constant)]
        fgraph = FunctionGraph(inputs, outputs, clone=True)
        numba_cache_mode().optimizer.rewrite(fgraph)
        for node in fgraph.toposort():
            ops.setdefault(type(node.op).__qualname__, node)
    return ops


@pytest.fixture(scope="module")
def op_nodes():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return family_ops()


def other_value(value):
    """A value of the same kind as `value` but different, or None if there is no obvious one."""
    from pytensor.scalar import ScalarOp, exp, log

    if isinstance(value, bool):
        return not value
    if isinstance(value, int | np.integer):
        return value + 1
    if isinstance(value, float | np.floating):
        return value + 1.5
    if isinstance(value, str):
        return value + "_other"
    if isinstance(value, slice):
        return slice(value.start, value.stop, 2 if value.step is None else value.step + 1)
    if isinstance(value, tuple):
        for position, item in enumerate(value):
            changed = other_value(item)
            if changed is not None:
                return (*value[:position], changed, *value[position + 1:])
        return (*value, 0)
    if isinstance(value, Mapping):
        return type(value)({**value, 99: 0})
    if isinstance(value, np.dtype):
        return np.dtype("int8" if value != np.int8 else "int16")
    if isinstance(value, Type) and hasattr(value, "dtype"):
        return value.clone(dtype="int8" if value.dtype != "int8" else "int16")
    if isinstance(value, ScalarOp):
        return log if value == exp else exp
    if dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            changed = other_value(getattr(value, field.name))
            if changed is not None:
                return dataclasses.replace(value, **{field.name: changed})
    return None


def described_attributes(op) -> tuple:
    """What an op is keyed by: its props; Scan's described fields; a prop-less scalar
    op's public state. (Inner graphs: tests/test_keys.py.)"""
    from pytensor.compile.builders import OpFromGraph
    from pytensor.scan.op import Scan

    if hasattr(op, "__props__"):
        return op.__props__
    if isinstance(op, Scan):
        return ("info", "truncate_gradient")
    if isinstance(op, OpFromGraph):
        return ()
    return tuple(name for name in vars(op) if not name.startswith("_"))


#: Op families whose every described attribute must have been varied.
MUST_VARY = ("AdvancedSubtensor", "Subtensor", "IncSubtensor", "Elemwise", "Sum", "Max", "Argmax",
             "DimShuffle", "Join", "Split", "Reshape", "Cholesky", "CholeskySolve", "Scan",
             "Append", "XTensorFromTensor", "AllocEmpty", "MakeVector", "Add", "LazyIfElse")


#: Props whose generic variant would be malformed (PyTensor's DestroyHandler, which
#: the graph key's node order consults, reads them as pairs of input positions).
WELL_FORMED_VARIANTS = {
    "destroyhandler_tolerate_aliased": ((0, 1),),
    "destroyhandler_tolerate_same": [(0, 1)],
}


def test_every_prop_of_every_registered_op_family_changes_both_keys(op_nodes):
    from pytensor.link.numba.dispatch.basic import numba_funcify

    varied = set()
    for name, node in sorted(op_nodes.items()):
        # Only ops PyTensor's numba dispatch converts (not its generic fallback).
        assert numba_funcify.dispatch(type(node.op)) is not numba_funcify.dispatch(Op), name
        base = keys_of(node)
        for attribute in described_attributes(node.op):
            value = WELL_FORMED_VARIANTS.get(attribute) or other_value(getattr(node.op, attribute))
            if value is None:
                continue
            changed = copy.copy(node.op)
            object.__setattr__(changed, attribute, value)
            keys = keys_of(node, changed)
            varied.add(name)
            assert keys[0] != base[0], f"op key ignores {name}.{attribute}"
            assert keys[1] != base[1], f"graph key ignores {name}.{attribute}"
    assert not set(MUST_VARY) - varied


# --- property-based: random props, new types -----------------------------------


class PropsOp(Op):
    """An op of three props, for random prop values."""

    __props__ = ("first", "second", "third")

    def __init__(self, first, second, third):
        self.first, self.second, self.third = first, second, third

    def make_node(self, x):
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = inputs[0]


class TaggedTensorType(TensorType):
    """A TensorType subclass adding a prop, as SparseTensorType adds ``format``:
    numba_cache cannot know what its code reads, so nothing of it may be dropped."""

    __props__ = ("dtype", "shape", "tag")

    def __init__(self, dtype, shape, tag):
        self.tag = tag
        super().__init__(dtype, shape=shape)

    def clone(self, dtype=None, shape=None, **kwargs):
        return type(self)(dtype or self.dtype, self.shape if shape is None else shape, self.tag)


PROP_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8)
    | st.floats(allow_nan=False),
    lambda inner: st.tuples(inner) | st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)


def _same(a, b) -> bool:
    """Equal and of the same types throughout (1, 1.0 and True are three values to a kernel)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, frozenset):
        return len(a) == len(b) and all(any(_same(x, y) for y in b) for x in a)
    if isinstance(a, float):
        return a.hex() == b.hex()  # -0.0 is not 0.0
    return a == b


@settings(max_examples=150, deadline=None)
@given(props=st.tuples(PROP_VALUES, PROP_VALUES, PROP_VALUES),
       position=st.integers(0, 2), new_value=PROP_VALUES)
def test_random_props_change_the_keys_unless_equal(props, position, new_value):
    changed = list(props)
    changed[position] = new_value
    x = pt.vector("x")
    base = keys_of(PropsOp(*props).make_node(x))
    other = keys_of(PropsOp(*changed).make_node(x))
    assert describe_op(PropsOp(*props)) == describe_op(PropsOp(*props))
    if _same(props[position], new_value):
        assert other == base
    else:
        assert other[0] != base[0] and other[1] != base[1]


@settings(max_examples=100, deadline=None)
@given(tags=st.tuples(PROP_VALUES, PROP_VALUES), dtype=st.sampled_from(["float64", "int32"]))
def test_a_new_tensor_type_subclass_keeps_its_props_in_the_op_key(tags, dtype):
    first = TaggedTensorType(dtype, (None, 3), tags[0])
    second = TaggedTensorType(dtype, (None, 3), tags[1])
    same = _same(tags[0], tags[1])
    assert (copy_keys(first)[0] == copy_keys(second)[0]) == same
    # And it is never taken for the plain TensorType of the same dtype and shape.
    assert copy_keys(first)[0] != copy_keys(TensorType(dtype, shape=(None, 3)))[0]


SHAPES = st.lists(st.sampled_from([None, 1, 2, 5]), min_size=0, max_size=3).map(tuple)


@settings(max_examples=100, deadline=None)
@given(first=st.tuples(st.sampled_from(["float64", "float32", "int64"]), SHAPES),
       second=st.tuples(st.sampled_from(["float64", "float32", "int64"]), SHAPES))
def test_plain_tensor_op_keys_are_equal_exactly_when_kernel_code_is(first, second):
    """Equal op keys iff same dtype, rank and known-to-be-1 pattern; graph keys iff same type."""
    (dtype_a, shape_a), (dtype_b, shape_b) = first, second
    a, b = copy_keys(TensorType(dtype_a, shape=shape_a)), copy_keys(TensorType(dtype_b, shape=shape_b))
    same_code = (dtype_a == dtype_b and len(shape_a) == len(shape_b)
                 and [n == 1 for n in shape_a] == [n == 1 for n in shape_b])
    assert (a[0] == b[0]) == same_code
    assert (a[1] == b[1]) == (first == second)
