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

Finding the constants (:func:`trailing_constants`) builds nothing: a graph kernel
found in the store needs only them, since its source names them. Building the
node that takes them (:func:`lifted`) is for a miss, which converts the node.

PyTensor internals used, all here: ``Composite.fgraph`` (``clients``, ``unfreeze``,
which keeps the constant objects), the specs of ``FusedElemwise``
(``indexed_inputs``, ``indexed_outputs``, ``reduced_outputs``) and the way
PyTensor's own ``with_scalar_io`` rebuilds one (``fgraph.bind``, the ``fgraph``
argument). If they move, nodes keep their baked kernels or, when only the build
fails, are computed by an uncacheable kernel (:mod:`numba_cache.kernels.assembly.graph_kernel`),
and ``tests/test_lifted_constants.py`` fails.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import numpy as np

#: The scalar ops (by class name in ``pytensor.scalar.basic``) whose floating-point
#: constant operands are lifted.
LIFTED_READERS = ("Add", "Sub", "Mul")


def trailing_constants(node) -> tuple:
    """The constants the kernel of `node` takes after `node`'s own inputs, in a
    deterministic order: () when it computes `node` as it is. Builds no node."""
    found = _found_or_none(node)
    return () if found is None else found.constants


def lifted_positions(node) -> tuple:
    """``(graph, {id(constant): position})``: the ``Composite``'s graph whose constants
    `node`'s kernel takes as trailing inputs, and their positions among them;
    ``(None, {})`` when none is. Builds no node.

    The positions hold in that graph only: PyTensor interns frozen nodes with their
    constants, so a ``Composite`` nested in it may read the same constant object,
    baked into the kernel there.
    """
    found = _found_or_none(node)
    if found is None:
        return None, {}
    return found.composite.fgraph, {id(constant): position
                                    for position, constant in enumerate(found.liftable)}


#: An object's address in its default repr (``<... object at 0x7f...>``): another in every
#: process, so left out of the text (a graph kernel's source must be the same in each).
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def summary(node, lifts: bool, width: int | None = None) -> str:
    """`node`'s op as text (of at most `width` characters); its class alone when its kernel
    `lifts` constants, whose values the text must not spell (a graph kernel serves every
    value of them)."""
    if lifts:
        return f"{type(node.op).__name__} (constants lifted)"[:width]
    return _ADDRESS.sub("", str(node.op))[:width]


def lifted(node, constants: tuple):
    """The node computing `node` with `constants` (its :func:`trailing_constants`, not
    empty) as trailing inputs, the same outputs' types; None if PyTensor will not build it."""
    from pytensor.tensor.elemwise import Elemwise

    try:
        found = _found(node)
        parameterised = _with_parameters(found.composite, found.liftable)
        if found.kind == "elemwise":
            elemwise = Elemwise(parameterised, inplace_pattern=node.op.inplace_pattern)
            replacement = elemwise.make_node(*node.inputs, *constants)
        elif found.kind == "scalar":
            replacement = parameterised.make_node(*node.inputs, *constants)
        else:
            replacement = _lifted_fused(node, parameterised, constants)
    except Exception:  # noqa: BLE001 - the caller computes the node another way
        return None
    if [output.type for output in replacement.outputs] != [output.type for output in node.outputs]:
        return None
    return replacement


def _found_or_none(node):
    """:func:`_found`, or None when `node` is laid out as PyTensor no longer does: then
    nothing is lifted and its constants stay baked."""
    try:
        return _found(node)
    except Exception:  # noqa: BLE001 - any layout _found does not know
        return None


class _Found(NamedTuple):
    kind: str  # "scalar", "elemwise" or "fused"
    composite: object
    liftable: tuple  # the constants of the composite's own graph
    constants: tuple  # what the kernel takes: `liftable`, or as one-element tensors


def _found(node) -> _Found | None:
    """What `node` computes and the constants its kernel takes, or None."""
    from pytensor.scalar import Composite
    from pytensor.tensor.elemwise import Elemwise
    from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
    from pytensor.tensor.rewriting.scalarize import ScalarizedElemwise

    op = node.op
    if isinstance(op, Composite):
        kind, composite = "scalar", op
    elif isinstance(op, Elemwise) and isinstance(op.scalar_op, Composite):
        kind, composite = "elemwise", op.scalar_op
    elif isinstance(op, FusedElemwise | ScalarizedElemwise):
        kind, composite = "fused", _fused_composite(op)
    else:
        return None
    liftable = () if composite is None else _liftable_constants(composite)
    if not liftable:
        return None
    constants = (_one_element_tensors(liftable, node.outputs[0].type.ndim)
                 if kind == "elemwise" else liftable)
    return _Found(kind, composite, liftable, constants)


def _fused_composite(op):
    """The ``Composite`` of PyTensor's elemwise fused with reductions (``FusedElemwise``)
    or taking native scalars (``ScalarizedElemwise``), or None. Not when it reads or
    writes through indices, whose inputs come after the elemwise's."""
    from pytensor.scalar import Composite
    from pytensor.tensor.elemwise import Elemwise

    specs = _fused_specs(op)
    if specs.get("indexed_inputs") or specs.get("indexed_outputs"):
        return None
    [elemwise] = [inner for inner in op.fgraph.apply_nodes if isinstance(inner.op, Elemwise)]
    scalar_op = elemwise.op.scalar_op
    return scalar_op if isinstance(scalar_op, Composite) else None


def _fused_specs(op) -> dict:
    return {name: getattr(op, name)
            for name in ("indexed_inputs", "indexed_outputs", "reduced_outputs")
            if hasattr(op, name)}


def _liftable_constants(composite) -> tuple:
    """The constants of `composite`'s graph that its kernel takes as inputs, in the
    order its nodes read them first (the graph's own objects)."""
    from pytensor.graph.basic import Constant

    frozen = composite.fgraph
    seen: dict = {}
    for inner_node in frozen.toposort():
        for variable in inner_node.inputs:
            if (isinstance(variable, Constant) and variable not in seen
                    and _liftable(variable, frozen.clients[variable])):
                seen[variable] = None
    return tuple(seen)


def _liftable(constant, clients) -> bool:
    from pytensor.scalar import basic

    readers = tuple(getattr(basic, name) for name in LIFTED_READERS)
    return (constant.type.dtype.startswith("float") and bool(clients)
            and all(client != "output" and type(client.op) in readers
                    for client, _ in clients))


@functools.lru_cache(maxsize=4096)
def _one_element_tensors(liftable: tuple, ndim: int) -> tuple:
    """The constants `liftable` (objects, hashed by identity) as tensors of `ndim`
    dimensions of length 1, the same objects for every node lifting them: nodes alike,
    constants included, are converted once (:func:`.kernels.conversion.op_kernel`)."""
    from pytensor.tensor import constant as tensor_constant

    return tuple(tensor_constant(np.full((1,) * ndim, constant.data, dtype=constant.type.dtype))
                 for constant in liftable)


@functools.lru_cache(maxsize=4096)
def _with_parameters(composite, liftable: tuple):
    """A ``Composite`` computing `composite` with its constants `liftable` (its own
    graph's objects, hashed by identity) read from trailing inputs instead."""
    from pytensor.graph.replace import clone_replace
    from pytensor.scalar import Composite

    inner = composite.fgraph.unfreeze()
    parameters = [constant.type() for constant in liftable]
    outputs = clone_replace(inner.outputs, replace=dict(zip(liftable, parameters, strict=True)))
    return Composite([*inner.inputs, *parameters], outputs)


def _lifted_fused(node, parameterised, constants: tuple):
    """A ``FusedElemwise`` or ``ScalarizedElemwise`` whose elemwise computes `parameterised`,
    the lifted constants native scalar inputs of its loop, as PyTensor passes scalars
    (its kernel keeps them out of the loop body)."""
    from pytensor.graph.basic import NominalVariable
    from pytensor.graph.fg import FunctionGraph
    from pytensor.scalar import ScalarType
    from pytensor.tensor.basic import atleast_Nd, tensor_from_scalar
    from pytensor.tensor.elemwise import Elemwise

    op = node.op
    frozen = op.fgraph
    inputs = [NominalVariable(position, variable.type)
              for position, variable in enumerate(frozen.inputs)]
    scalars = [NominalVariable(len(inputs) + position, ScalarType(constant.type.dtype))
               for position, constant in enumerate(constants)]
    inner = FunctionGraph([*inputs, *scalars], frozen.bind(inputs), clone=False)
    [elemwise] = [inner_node for inner_node in inner.apply_nodes
                  if isinstance(inner_node.op, Elemwise)]
    ndim = elemwise.outputs[0].type.ndim
    tensors = [atleast_Nd(tensor_from_scalar(scalar), n=ndim) for scalar in scalars]
    replacement = Elemwise(parameterised, inplace_pattern=elemwise.op.inplace_pattern).make_node(
        *elemwise.inputs, *tensors)
    inner.replace_all(zip(elemwise.outputs, replacement.outputs, strict=True),
                      reason="lift_constants")
    fused = type(op)([*inputs, *scalars], inner.outputs, fgraph=inner.freeze(),
                     destroy_map=op.destroy_map, **_fused_specs(op))
    return fused.make_node(*node.inputs, *constants)
