"""PyTensor's private API, as plain functions (each checked by a seam of :mod:`.pytensor_seams`)."""

from __future__ import annotations


def mode_query(mode):
    """The rewrite query a mode was built with (``Mode._optimizer``)."""
    return mode._optimizer
