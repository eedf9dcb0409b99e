"""numba_cache: a persistent, inspectable cache of PyTensor's numba kernels.

Importing this package registers the ``NUMBA_CACHE`` mode::

    import numba_cache
    f = pytensor.function(inputs, outputs, mode="NUMBA_CACHE")

or routes every numba compile of PyTensor through the cache, ``mode="NUMBA"``,
PyMC and nutpie included (see :mod:`numba_cache.integration.activation`)::

    numba_cache.activate()    # or NBCACHE_ACTIVATE=1 in the environment

The import itself is cheap: it imports neither PyTensor nor numba. The mode is
registered (and ``NBCACHE_ACTIVATE`` obeyed) as soon as PyTensor is imported,
before or after this package; the names below load on first use.
"""

from numba_cache.integration.when_pytensor import when_pytensor_is_imported

__version__ = "0.1.0"

_LAZY_NAMES = {
    "MODE_NAME": "numba_cache.integration.linker",
    "NumbaCacheLinker": "numba_cache.integration.linker",
    "numba_cache_mode": "numba_cache.integration.linker",
    "activate": "numba_cache.integration.activation",
    "deactivate": "numba_cache.integration.activation",
    "is_active": "numba_cache.integration.activation",
    "register_uncacheable": "numba_cache.kernels.outcomes.uncacheable",
    "reset_session_stats": "numba_cache.kernels.outcomes.report",
    "session_stats": "numba_cache.kernels.outcomes.report",
    "settings": "numba_cache.settings",
}

__all__ = sorted(_LAZY_NAMES)


def __getattr__(name):
    module_name = _LAZY_NAMES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'numba_cache' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(module_name)
    value = module if module_name == f"numba_cache.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY_NAMES))


def _register_and_obey_the_environment() -> None:
    from numba_cache.integration.activation import activate_if_asked
    from numba_cache.integration.linker import register

    register()
    activate_if_asked()


when_pytensor_is_imported(_register_and_obey_the_environment)
