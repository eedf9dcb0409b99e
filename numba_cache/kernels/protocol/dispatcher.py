"""numba dispatchers whose compiles go through a :class:`KernelCache`."""

from __future__ import annotations

from numba.core.registry import CPUDispatcher

from numba_cache._compat import numba_internals
from numba_cache.collector import older_objects_frozen
from numba_cache.kernels.protocol.self_contained import SelfContainedCompiler


class CachedDispatcher(CPUDispatcher):
    """A CPU dispatcher that holds its cache's single-flight lock while compiling.

    numba loads its extensions before a dispatcher's first compile of the process
    (``_compilation_chain_init_hook``), reading the entry points of every installed
    distribution: about 10 ms, a sixth of a warm start. Ours loads them when numba's
    compiler runs (:class:`.self_contained.SelfContainedCompiler`), so a load from the
    store does without; the arguments are typed as before, by numba's own typing.
    """

    def _compilation_chain_init_hook(self):
        pass

    def compile(self, sig):
        with self._cache.compiling(), older_objects_frozen():
            return super().compile(sig)


def fastmath_flags(enabled: bool):
    """PyTensor's opinionated fastmath set (see ``pytensor.link.numba.dispatch.basic``)."""
    if not enabled:
        return False
    return {"arcp", "contract", "afn", "reassoc", "nsz"}


def cached_dispatcher(py_func, cache, *, called_from_python: bool, fastmath: bool,
                      pipeline_class=SelfContainedCompiler):
    """Wrap `py_func` in a :class:`CachedDispatcher` that consults `cache`.

    Kernels only called from other kernels skip numba's CPython and cfunc
    wrappers, which cost compile time and are never used. Kernels are compiled
    self-contained (:mod:`.self_contained`; `pipeline_class` is that compiler or
    a subclass), so a process runs the same code whether it compiled the kernel
    or loaded it.
    """
    targetoptions = {
        "nopython": True,
        "boundscheck": None,
        "fastmath": fastmath_flags(fastmath),
    }
    return dispatcher_with_options(py_func, cache, targetoptions, {},
                                   called_from_python=called_from_python,
                                   pipeline_class=pipeline_class)


def dispatcher_with_options(py_func, cache, targetoptions: dict, local_types: dict, *,
                            called_from_python: bool, pipeline_class=SelfContainedCompiler):
    """A :class:`CachedDispatcher` of `py_func` compiled with numba's `targetoptions` and
    `local_types` (as :func:`cached_dispatcher`, whose options are numba_cache's own)."""
    if not called_from_python:
        targetoptions = targetoptions | {"no_cpython_wrapper": True, "no_cfunc_wrapper": True}
    dispatcher = CachedDispatcher(
        py_func=py_func, locals=local_types, targetoptions=targetoptions,
        pipeline_class=pipeline_class,
    )
    numba_internals.set_dispatcher_cache(dispatcher, cache)
    return dispatcher
