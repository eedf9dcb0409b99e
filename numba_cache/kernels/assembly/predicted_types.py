"""The numba types of a graph body's values, predicted from PyTensor's types.

A helper compiling op kernels ahead (:mod:`.compile_ahead`) compiles each for the
numba types its arguments will have once the typing reaches it. numba types an
array by dtype, rank and layout (C, F or any); the layout of a value is that of
a new array, of the input an inplace op writes into, or of the view it is, as
PyTensor's numba conversions lay them out. The rules were read off numba's
typing of the benchmark models; a wrong one costs time, never a result (the
typing compiles what the helper mispredicted), and :func:`mispredicted` counts them.
"""

from __future__ import annotations

import sys


def predict(steps: list, outputs: dict, value_types: dict, index: int) -> dict:
    """The numba types of the values of `steps` from `index` on, as predicted from their
    PyTensor types, with `value_types` (those typed so far); a value that cannot be
    predicted is left out."""
    predicted = dict(value_types)
    for step in steps[index:]:
        variables = outputs[step.kernel]
        node = variables[0].owner if variables else None
        for position, (name, variable) in enumerate(zip(step.outputs, variables, strict=True)):
            if name not in predicted:
                type_ = _predicted_type(node, position, variable, step, predicted)
                if type_ is not None:
                    predicted[name] = type_
    return predicted


def mispredicted(steps: list, outputs: dict, value_types: dict) -> list:
    """The names of the values of `steps` whose type, predicted from the types their step
    read, is not the type `value_types` gives them (what the typing found)."""
    wrong = []
    for step in steps:
        variables = outputs[step.kernel]
        for position, (name, variable) in enumerate(zip(step.outputs, variables, strict=True)):
            if name in value_types:
                type_ = _predicted_type(variable.owner, position, variable, step, value_types)
                if type_ is not None and type_ != value_types[name]:
                    wrong.append(name)
    return wrong


def _predicted_type(node, position: int, variable, step, predicted: dict):
    """numba's type of `variable`, output `position` of `node`: an output written into an
    input (``destroy_map``) has that input's type, unless it is read-only (then the op
    copies it); a new array has the layout :func:`_new_layout` predicts, a view
    (``view_map``) the one :func:`_view_layout` predicts."""
    import numba
    import numpy as np
    from numba.core import types
    from pytensor.scalar import ScalarType
    from pytensor.tensor import TensorType

    if isinstance(variable.type, ScalarType):
        return numba.from_dtype(np.dtype(variable.type.dtype))
    if not isinstance(variable.type, TensorType):
        return None
    dtype = numba.from_dtype(variable.type.numpy_dtype)
    op = node.op
    if _is_scan(op):  # slices of its own buffers, whatever its maps say
        return types.Array(dtype, variable.type.ndim, "A" if variable.type.ndim else "C")
    destroyed = getattr(op, "destroy_map", {}).get(position)
    if destroyed:
        written = predicted.get(step.inputs[destroyed[0]])
        if not isinstance(written, types.Array) or written.mutable:
            return written
    viewed = getattr(op, "view_map", {}).get(position)
    if not viewed:
        return types.Array(dtype, variable.type.ndim, _new_layout(op, position))
    source = predicted.get(step.inputs[viewed[0]])
    if not isinstance(source, types.Array):
        return None
    return types.Array(dtype, variable.type.ndim, _view_layout(op, source),
                       readonly=not source.mutable)


def _is_scan(op) -> bool:
    scan = sys.modules.get("pytensor.scan.op")  # not imported by graphs without one
    return scan is not None and isinstance(op, scan.Scan)


def _new_layout(op, position: int) -> str:
    """The layout of a new array: C, but for a fused reduction over other than the
    leading axes (its result is indexed out of the array kept with the reduced axes)."""
    reduced = getattr(op, "reduced_outputs", None)
    spec = reduced[position] if reduced and position < len(reduced) else None
    if spec is not None and tuple(spec[1]) != tuple(range(len(spec[1]))):
        return "A"
    return "C"


def _view_layout(op, source) -> str:
    """The layout of PyTensor's numba view of a `source` array (as seen of its kernels):
    a transpose swaps C and F; adding or dropping broadcastable axes keeps the layout
    (not to or from a 0-d array); a leading slice or integer index keeps C; a
    diagonal is a copy; any other view is of any layout."""
    from pytensor.tensor.basic import ExtractDiag
    from pytensor.tensor.elemwise import DimShuffle
    from pytensor.tensor.subtensor import Subtensor

    if isinstance(op, ExtractDiag):
        return "C"
    if isinstance(op, DimShuffle) and source.ndim > 0 and op.new_order:
        kept = [axis for axis in op.new_order if axis != "x"]
        if kept == sorted(kept):
            return source.layout
        if tuple(op.new_order) == (1, 0) and source.layout in "CF":
            return {"C": "F", "F": "C"}[source.layout]
    if isinstance(op, Subtensor) and source.layout == "C" and _leading_index(op.idx_list):
        return "C"
    return "A"


def _leading_index(entries) -> bool:
    """Whether Subtensor entries are integers only, or one slice without a step."""
    if len(entries) == 1 and isinstance(entries[0], slice):
        return entries[0].step is None
    return not any(isinstance(entry, slice) for entry in entries)
