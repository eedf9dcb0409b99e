"""Whether test doubles replace numba's compiler; if so, numba_cache steps aside.

PyTensor's own tests compile every function of ``compare_numba_and_py`` a second
time under such doubles (``tests/link/numba/test_basic.py::eval_python_only``):
``numba.njit`` and PyTensor's ``numba_njit`` become functions that return the
Python function unchanged, and numba's ``from_dtype`` becomes the identity.
PyTensor's ``NumbaLinker`` then runs the graph's Python code, for coverage.

numba_cache cannot do the same. It compiles its kernels with numba's own
dispatchers, which no such patch reaches, and it keeps for reuse what it
builds. Under the doubles its compile fails, and the plain Python functions it
built poison every compile after it in the process. It also reads the doubles
as a numba whose internals moved, and turns itself off.

So while the doubles are in place, the cache is off for that compile, without
concluding anything about numba (:func:`.context.current_context`), and
numba_cache's linker links as PyTensor's does: nothing is looked up, compiled by
numba_cache or kept (``tests/test_replaced_numba.py``).
"""

from __future__ import annotations

import operator
import sys

from numba_cache import session


def replaced() -> str | None:
    """Which of numba's or PyTensor's jit entry points does not give numba's dispatcher, or None.

    Probing builds two dispatchers (about 60 µs), and every compile asks several
    times: the verdict is kept for as long as the same objects are in place.
    """
    import numba

    # Not imported means not patched: importing it would cost a warm hit the dispatch's import.
    pytensor_dispatch = sys.modules.get("pytensor.link.numba.dispatch.basic")
    entry_points = (numba.njit, numba.np.numpy_support.from_dtype,
                    None if pytensor_dispatch is None else pytensor_dispatch.numba_njit)
    state = session.current()
    probed, verdict = state.numba_entry_points_probed
    if probed is not None and all(map(operator.is_, probed, entry_points)):
        return verdict
    verdict = _probe(*entry_points)
    state.numba_entry_points_probed = entry_points, verdict
    return verdict


def _probe(njit, from_dtype, pytensor_njit) -> str | None:
    import numba
    import numpy as np
    from numba.core.dispatcher import Dispatcher

    def probe():
        return None

    if not isinstance(njit(probe), Dispatcher):
        return "numba.njit"
    if from_dtype(np.dtype("float64")) != numba.float64:
        return "numba.np.numpy_support.from_dtype"
    if pytensor_njit is not None and not isinstance(pytensor_njit(probe), Dispatcher):
        return "pytensor.link.numba.dispatch.basic.numba_njit"
    return None
