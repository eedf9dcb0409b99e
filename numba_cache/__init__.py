"""numba_cache: a persistent, inspectable cache of PyTensor's numba kernels.

Importing this package registers the ``NUMBA_CACHE`` mode::

    import numba_cache
    f = pytensor.function(inputs, outputs, mode="NUMBA_CACHE")

or routes every numba compile of PyTensor through the cache, ``mode="NUMBA"``,
PyMC and nutpie included (see :mod:`numba_cache.integration.activation`)::

    numba_cache.activate()    # or NBCACHE_ACTIVATE=1 in the environment
"""

from numba_cache import settings
from numba_cache.integration.activation import activate, activate_if_asked, deactivate, is_active
from numba_cache.integration.linker import MODE_NAME, NumbaCacheLinker, numba_cache_mode, register
from numba_cache.kernels.report import reset_session_stats, session_stats
from numba_cache.kernels.uncacheable import register_uncacheable

__version__ = "0.1.0"

register()
activate_if_asked()

__all__ = [
    "MODE_NAME",
    "NumbaCacheLinker",
    "activate",
    "deactivate",
    "is_active",
    "numba_cache_mode",
    "register_uncacheable",
    "reset_session_stats",
    "session_stats",
    "settings",
]
