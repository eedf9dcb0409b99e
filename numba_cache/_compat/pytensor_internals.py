"""PyTensor's private API, as plain functions (each checked by a seam of :mod:`.pytensor_seams`)."""

from __future__ import annotations

#: The rewrite that folds ops over constants: a read of data by it gives derived data, and
#: :mod:`numba_cache.rewritten.data_reads` reads its local ``node`` to follow the fold.
CONSTANT_FOLDING = "pytensor.tensor.rewriting.basic.unconditional_constant_folding"


def mode_query(mode):
    """The rewrite query a mode was built with (``Mode._optimizer``)."""
    return mode._optimizer

#: The logger PyTensor's rewriters report a failed rewrite on, at ERROR, before going on
#: without it (``SequentialGraphRewriter.warn``, ``NodeProcessingGraphRewriter.warn``).
REWRITE_FAILURE_LOGGER = "pytensor.graph.rewriting.basic"
