"""Op kernels for every length, where PyTensor's conversion bakes a length into the code.

PyTensor builds the inner graph of some ops from their inputs' types, static lengths
included, and compiles it as it stands: ``AllocDiag`` (the gradient of a matrix's
diagonal, in every model with a Cholesky factor's log-determinant: a Gaussian process,
a multivariate normal) holds its vector's length in an ``Alloc`` and in an ``arange``
folded to a constant. Its op kernel is then another for each length: the same model on
data of another size compiles it again (about 1 s of the GP benchmark's new model), and
cannot be served from remembered op kernel keys (:mod:`.remembered_op_keys`).

The conversions registered here (by op type, as PyTensor's dispatch registers its own)
serve every length with one kernel. Each only moves values, no floating-point
arithmetic: its results are PyTensor's bit for bit, whatever the code around them.
A node a conversion does not handle (a batched diagonal, say) gets PyTensor's, and
so does an op class for which a numba conversion of its own has been registered
(by PyTensor or a user) in place of the inner graph's.
"""

from __future__ import annotations

import hashlib
import inspect
from functools import singledispatch

import numpy as np

from numba_cache.keys.graph import KERNEL_LEVEL_OPS


@singledispatch
def length_generic(op, node) -> tuple | None:
    """``(numba implementation, cache key)`` computing `node` at any static lengths, or
    None: PyTensor's own conversion is used."""
    return None


def _source_digest(conversion) -> str:
    """What keys a conversion's code: its source (an edit makes new keys)."""
    return hashlib.sha256(inspect.getsource(conversion).encode()).hexdigest()[:16]


def _pytensor_converts_inner_graph(op) -> bool:
    """Whether PyTensor converts `op` by compiling its inner graph, as for any
    ``OpFromGraph``: not if a conversion of its own class was registered since (by
    PyTensor, or by a user who wants theirs), which is then used."""
    try:
        from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
        from pytensor.link.numba.dispatch.compile_ops import numba_funcify_OpFromGraph
    except ImportError:  # PyTensor moved it: its conversion, as for any op
        return False
    return numba_funcify_and_cache_key.dispatch(type(op)) is numba_funcify_OpFromGraph


def _alloc_diag_reads(op) -> dict:
    """All :func:`_alloc_diag` reads of the op."""
    return {"axis1": op.axis1, "axis2": op.axis2, "offset": op.offset}


def _alloc_diag(op, node) -> tuple | None:
    """A matrix of zeros with the vector on diagonal `offset`, as PyTensor's inner graph
    (``zeros``, then ``set_subtensor`` at ``arange`` indices) computes it."""
    from pytensor.link.numba.dispatch.basic import numba_njit

    if (node.inputs[0].type.ndim != 1 or (op.axis1, op.axis2) != (0, 1)
            or not _pytensor_converts_inner_graph(op)):
        return None
    offset = int(op.offset)
    first_row, first_column, extra = max(0, -offset), max(0, offset), abs(offset)

    @numba_njit
    def alloc_diag(diagonal):
        size = diagonal.shape[0] + extra
        matrix = np.zeros((size, size), dtype=diagonal.dtype)
        for position in range(diagonal.shape[0]):
            matrix[first_row + position, first_column + position] = diagonal[position]
        return matrix

    return alloc_diag, (f"numba_cache.length_generic.AllocDiag {_alloc_diag_reads(op)} "
                        f"{_source_digest(_alloc_diag)} {_source_digest(_alloc_diag_reads)}")


def _register() -> None:
    """Register each conversion for its op class, if PyTensor still has it (checked by
    ``tests/test_length_generic.py``: a class gone makes that test fail, not a compile),
    and key ops of that class by what the conversion reads of them
    (:data:`numba_cache.keys.graph.KERNEL_LEVEL_OPS`)."""
    from pytensor.tensor import basic

    if (alloc_diag := getattr(basic, "AllocDiag", None)) is not None:
        length_generic.register(alloc_diag, _alloc_diag)
        KERNEL_LEVEL_OPS[alloc_diag] = _alloc_diag_reads


_register()
