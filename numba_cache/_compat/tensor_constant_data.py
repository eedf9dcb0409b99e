"""A property on ``TensorConstant.data``, installed only while a rewrite is watched.

:mod:`numba_cache.rewritten.data_reads` sees every read of a data constant's values
while PyTensor rewrites. Every way to a constant's values goes through the
instance attribute ``data`` (set in ``Constant.__init__``), so a property of the
same name on the class sees them all; it stores the value where the plain
attribute lives (the instance ``__dict__``), so installing and removing it
changes nothing for constants made before, during or after.

The property is installed when the first watch begins and removed when the last
one ends (watches nest and may run in several threads), so that outside a watched
rewrite PyTensor runs exactly as without numba_cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from numba_cache import session
from numba_cache._compat import require, seam


@contextmanager
def reads_seen_by(getter: Callable) -> Iterator[None]:
    """Route reads of ``TensorConstant.data`` through ``getter(constant, value)`` meanwhile."""
    from pytensor.tensor.variable import TensorConstant

    state = session.current()
    with state.tensor_constant_lock:
        if state.tensor_constant_watches == 0:
            TensorConstant.data = property(lambda constant: getter(constant, _value(constant)),
                                           _set_value)
        state.tensor_constant_watches += 1
    try:
        yield
    finally:
        with state.tensor_constant_lock:
            state.tensor_constant_watches -= 1
            if state.tensor_constant_watches == 0:
                del TensorConstant.data


def _value(constant):
    try:
        return constant.__dict__["data"]
    except KeyError:  # not set yet: as a plain attribute would be
        raise AttributeError("data") from None


def _set_value(constant, value) -> None:
    constant.__dict__["data"] = value


@seam("TensorConstant.data", "pytensor", ("3.3",), "rewritten/data_reads.py")
def check() -> None:
    import numpy as np
    from pytensor.graph.basic import Constant
    from pytensor.tensor.type import dvector
    from pytensor.tensor.variable import TensorConstant

    require(all("data" not in vars(cls) for cls in TensorConstant.__mro__),
            "a class of TensorConstant defines 'data' itself")
    require("data" not in getattr(Constant, "__slots__", ()), "Constant keeps 'data' in a slot")
    constant = TensorConstant(dvector, np.zeros(2))
    require("data" in vars(constant), "a TensorConstant no longer keeps its value in 'data'")
