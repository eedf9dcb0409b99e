"""Scalar constants of a fused elemwise kernel passed to it as arguments, not baked in.

PyTensor's fusion bakes the scalar constants of a fused elemwise (``Composite``)
into its code: a prior's scale or a dataset's size is part of the kernel, so a
model variant, or the same model on a dataset of other sizes, compiles its fused
kernels again. The kernel of :func:`lifted` takes such constants as inputs of
their own, which the glue embeds: tensors of one element for an ``Elemwise``,
native scalars for PyTensor's ``FusedElemwise`` and ``ScalarizedElemwise`` (kept
out of the loop body, as PyTensor passes scalars) and a ``Composite`` on scalars.
The kernel is then keyed by the structure of the computation alone and serves
every value.

Only floating-point constants read by additions, subtractions and multiplications
alone are lifted: for these the operation is the same IEEE operation whether its
operand is a literal or a value read at run time. LLVM specialises code on other
constants (``x ** 2.0`` becomes ``x * x``, a division by a constant a
multiplication under fastmath, an integer or comparison constant folds into
branches): those stay baked. A lifted kernel gives the bits of the baked one
except where fastmath's reassociation used the constant's value (within
:data:`numba_cache.evaluation.compare.NUMBA_ULP_BOUND` of PyTensor's ``NUMBA``).

PyTensor internals used, all here: ``Composite.fgraph`` (``unfreeze``), the specs
of ``FusedElemwise`` (``indexed_inputs``, ``indexed_outputs``, ``reduced_outputs``)
and the way PyTensor's own ``with_scalar_io`` rebuilds one (``fgraph.bind``, the
``fgraph`` argument). If they move, nodes keep their baked kernels (any error
lifting a node leaves it as it is) and ``tests/test_lifted_constants.py`` fails.
"""

from __future__ import annotations

import functools

import numpy as np

#: The scalar ops (by class name in ``pytensor.scalar.basic``) whose floating-point
#: constant operands are lifted.
LIFTED_READERS = ("Add", "Sub", "Mul")


def lifted(node):
    """The node whose kernel computes `node`: `node` itself, or, for a ``Composite`` (on
    scalars, or in an elemwise) with liftable constants, an equivalent node taking them
    as trailing inputs (new constants; `node`'s own inputs first, in order)."""
    from pytensor.scalar import Composite
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
    from pytensor.tensor.rewriting.scalarize import ScalarizedElemwise

    op = node.op
    try:
        if isinstance(op, Composite):
            replacement = _lifted_scalar(node)
        elif isinstance(op, Elemwise) and isinstance(op.scalar_op, Composite):
            replacement = _lifted_elemwise(node)
        elif isinstance(op, FusedElemwise | ScalarizedElemwise):
            replacement = _lifted_fused(node)
        else:
            return node
    except Exception:  # noqa: BLE001 - a graph PyTensor will not rebuild keeps its baked kernel
        return node
    if replacement is None or ([output.type for output in replacement.outputs]
                               != [output.type for output in node.outputs]):
        return node
    return replacement


def _lifted_scalar(node):
    lifting = _lifted_composite(node.op)
    if lifting is None:
        return None
    composite, liftable = lifting
    return composite.make_node(*node.inputs, *liftable)


def _lifted_elemwise(node):
    from pytensor.tensor.elemwise import Elemwise

    lifting = _lifted_composite(node.op.scalar_op)
    if lifting is None:
        return None
    composite, liftable = lifting
    elemwise = Elemwise(composite, inplace_pattern=node.op.inplace_pattern)
    values = _one_element_tensors(tuple(liftable), node.outputs[0].type.ndim)
    return elemwise.make_node(*node.inputs, *values)


@functools.lru_cache(maxsize=4096)
def _one_element_tensors(liftable: tuple, ndim: int) -> list:
    """The constants `liftable` (objects, hashed by identity) as tensors of `ndim`
    dimensions of length 1, the same objects for every node lifting them: nodes alike,
    constants included, are converted once (:func:`.kernels.conversion.op_kernel`)."""
    from pytensor.tensor import constant as tensor_constant

    return [tensor_constant(np.full((1,) * ndim, constant.data, dtype=constant.type.dtype))
            for constant in liftable]


def _lifted_fused(node):
    """For PyTensor's elemwise fused with reductions (``FusedElemwise``) or taking native
    scalars (``ScalarizedElemwise``): the lifted constants are native scalar inputs of
    the loop, as PyTensor passes scalars (its kernel keeps them out of the loop body).
    Not when it reads or writes through indices, whose inputs come after the elemwise's."""
    from pytensor.graph.basic import NominalVariable
    from pytensor.graph.fg import FunctionGraph
    from pytensor.scalar import Composite, ScalarType
    from pytensor.tensor.basic import atleast_Nd, tensor_from_scalar
    from pytensor.tensor.elemwise import Elemwise

    op = node.op
    specs = {name: getattr(op, name)
             for name in ("indexed_inputs", "indexed_outputs", "reduced_outputs")
             if hasattr(op, name)}
    if specs.get("indexed_inputs") or specs.get("indexed_outputs"):
        return None
    frozen = op.fgraph
    [elemwise] = [inner for inner in frozen.apply_nodes if isinstance(inner.op, Elemwise)]
    if not isinstance(elemwise.op.scalar_op, Composite):
        return None
    lifting = _lifted_composite(elemwise.op.scalar_op)
    if lifting is None:
        return None
    composite, liftable = lifting
    inputs = [NominalVariable(position, variable.type)
              for position, variable in enumerate(frozen.inputs)]
    scalars = [NominalVariable(len(inputs) + position, ScalarType(constant.type.dtype))
               for position, constant in enumerate(liftable)]
    inner = FunctionGraph([*inputs, *scalars], frozen.bind(inputs), clone=False)
    [elemwise] = [inner_node for inner_node in inner.apply_nodes
                  if isinstance(inner_node.op, Elemwise)]
    ndim = elemwise.outputs[0].type.ndim
    tensors = [atleast_Nd(tensor_from_scalar(scalar), n=ndim) for scalar in scalars]
    replacement = Elemwise(composite, inplace_pattern=elemwise.op.inplace_pattern).make_node(
        *elemwise.inputs, *tensors)
    inner.replace_all(zip(elemwise.outputs, replacement.outputs, strict=True),
                      reason="lift_constants")
    fused = type(op)([*inputs, *scalars], inner.outputs, fgraph=inner.freeze(),
                     destroy_map=op.destroy_map, **specs)
    return fused.make_node(*node.inputs, *liftable)


def _lifted_composite(composite):
    """A ``Composite`` computing `composite` with its liftable constants as trailing
    inputs, and those constants; None if it has none.

    The outer nodes take these very objects, so that nodes alike stay alike: the
    lifting is remembered per ``Composite`` *and* the exact bits of its constants,
    in graph order, since PyTensor holds ``Composite`` ops equal whose constants
    differ in the sign of a zero (or are NaNs of other payloads)."""
    return _lifted_exactly(composite, _constant_bits(composite))


def _constant_bits(composite) -> tuple:
    from pytensor.graph.basic import Constant

    return tuple((position, index, variable.type.dtype, np.asarray(variable.data).tobytes())
                 for position, inner_node in enumerate(composite.fgraph.toposort())
                 for index, variable in enumerate(inner_node.inputs)
                 if isinstance(variable, Constant))


@functools.lru_cache(maxsize=4096)
def _lifted_exactly(composite, constant_bits: tuple):
    from pytensor.graph.basic import Constant
    from pytensor.graph.replace import clone_replace
    from pytensor.scalar import Composite

    inner = composite.fgraph.unfreeze()
    liftable = [variable for variable, clients in inner.clients.items()
                if isinstance(variable, Constant) and _liftable(variable, clients)]
    if not liftable:
        return None
    parameters = [variable.type() for variable in liftable]
    outputs = clone_replace(inner.outputs, replace=dict(zip(liftable, parameters, strict=True)))
    return Composite([*inner.inputs, *parameters], outputs), liftable


def _liftable(constant, clients) -> bool:
    from pytensor.scalar import basic

    readers = tuple(getattr(basic, name) for name in LIFTED_READERS)
    return (constant.type.dtype.startswith("float") and bool(clients)
            and all(client != "output" and type(client.op) in readers
                    for client, _ in clients))
