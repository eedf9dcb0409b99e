"""Which constants a kernel takes as hidden arguments instead of freezing them.

Observed data enters PyTensor graphs (and PyMC models) as constants. Frozen into
machine code, every new data set of the same shape would be a new kernel, large
arrays would bloat entries, and arrays over numba's 1e6-byte limit would make
the kernel uncacheable. Array constants of at least :data:`HIDDEN_MIN_SIZE`
elements are therefore passed to the whole-graph kernel as extra arguments, and whole-graph
and op kernel keys describe them by type, dtype and shape only.

Rewriting still sees their values. New data skips rewriting only when it
answers the questions rewriting asked of the old data the same way (see
:mod:`.data_reads`); otherwise it is rewritten, then hits the kernel.
"""

from __future__ import annotations

import numpy as np

#: Smallest array constant (in elements) passed as a hidden argument. Counted in
#: elements, not bytes: rewrites downcast index data (919 int64 become uint8).
HIDDEN_MIN_SIZE = 32


def is_hidden(constant) -> bool:
    data = constant.data
    return (
        isinstance(data, np.ndarray)
        and data.ndim > 0
        and not data.dtype.hasobject
        and data.size >= HIDDEN_MIN_SIZE
    )


def hidden_value(constant) -> np.ndarray:
    """The array passed for `constant`: C-contiguous, so the kernel signature is stable."""
    return np.ascontiguousarray(constant.data)


def embedded_value(data):
    """`data` as a kernel embeds it: an array with the strides of its C-ordered copy.

    numba writes an embedded array's strides into the code, and keys describe a
    constant by its values: a C-contiguous array may have any stride along a
    dimension of length 1 or of an empty array (PyTensor's empty core shapes have
    stride 0, their unpickled copies 8), which moves no element but would make the
    same key compile to other code.
    """
    if not (isinstance(data, np.ndarray) and data.flags.c_contiguous):
        return data
    strides = tuple(data.itemsize * int(np.prod(data.shape[axis + 1:], dtype=np.int64))
                    for axis in range(data.ndim))
    if data.strides == strides:
        return data
    return np.lib.stride_tricks.as_strided(data, strides=strides,
                                           writeable=data.flags.writeable)


def hidden_constants(fgraph) -> list:
    """The hidden constants of `fgraph`, in the canonical order of kernel parameters.

    The order is that of first visit in a depth-first walk from the outputs (in
    output order) through node inputs (in input order): it depends only on the
    graph's structure, never on toposort tie-breaking or creation order, so two
    graphs with the same key pass their hidden arguments the same way. Each
    hidden reference in a key carries its position in this order, so the key
    also records which uses share one argument.
    """
    from pytensor.graph.basic import Constant

    order: list = []
    seen_constants: set = set()
    visited_nodes: set = set()
    stack = list(reversed(fgraph.outputs))
    while stack:
        variable = stack.pop()
        if isinstance(variable, Constant):
            if variable not in seen_constants and is_hidden(variable):
                seen_constants.add(variable)
                order.append(variable)
            continue
        node = variable.owner
        if node is None or node in visited_nodes:
            continue
        visited_nodes.add(node)
        stack.extend(reversed(node.inputs))
    return order
