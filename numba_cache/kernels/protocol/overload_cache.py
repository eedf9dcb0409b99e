"""numba's own implementations of the functions C callbacks call, looked up and stored.

nutpie's callbacks (:mod:`..callbacks.cfunc`) call NumPy and Python functions
that numba implements with ``@overload``: ``np.all``, ``np.take``, a broadcast
copy ``out[...] = values`` and the message of its failure (which formats
integers into a string). numba compiles each implementation for its argument
types in a dispatcher of its own, kept for the process only: about 3 s of
nutpie's logp callback, whatever the model. The callbacks are stored, but
their key holds the graph's, so every process whose model changed since the
last run (the edit-and-rerun loop) compiled those implementations again.

So each implementation numba builds from a function of its own modules gets a
cache object (:class:`OverloadCache`, installed on the dispatcher
``_OverloadFunctionTemplate._build_impl`` makes, :func:`install`). While a
callback of numba_cache's compiles (outside a kernel compiled within it,
:data:`SERVED_WITHIN`), each compile of an implementation is looked up, and
stored on a miss, under a key of its own
(:func:`numba_cache.keys.overloads.overload_key`): the function's code, closure
and defaults, the signature, the flags it compiles under (inherited from its
caller: fastmath, the error model) and the fingerprint.

What is stored is numba's compile, unchanged, with the module numba keeps for
linking it (the bitcode a caller links in and may inline); a process that
compiled it links it in as parsed from that bitcode, as a process loading it
does. The callback keeps its own copy of what it links (:mod:`.self_contained`);
the implementation's own object code may call other modules' copies of its
callees, as numba's cache leaves them, and no kernel of numba_cache's calls it.

A process keeps one compile per key and signature (loaded or compiled): a second
dispatcher of the same implementation serves it rather than loading the same
symbols twice. Nothing here may make a compile fail: a key that cannot be made,
or any fault of the cache, compiles as numba compiles.
"""

from __future__ import annotations

from numba_cache import session
from numba_cache._compat import numba_internals
from numba_cache.kernels.outcomes import report
from numba_cache.kernels.protocol.cache import KernelCache, StoreCache, innermost_kernel_compile
from numba_cache.kernels.protocol.lookup import SERVE_EVERY_HIT, Hit, Source
from numba_cache.keys.overloads import keyed, overload_key
from numba_cache.logs import logger


#: The kernels whose compiles are served numba's implementations: C callbacks (nutpie's).
#: Their code moves values between nutpie's buffers and the graph kernel they call by
#: symbol; the implementations they call (broadcasting a copy, the message of its
#: failure, ``np.all``, ``np.isfinite``) compute nothing a result is made of. Not op or
#: graph kernels: numba links into a kernel, besides an implementation's module, its own
#: copies of numba's internal subroutines, under names of the process that compiled them,
#: so a kernel linking an implementation compiled in another process holds two copies of
#: such a subroutine where one compiled with it holds one, and the optimiser may arrange
#: a reduction otherwise: last bits that would depend on what the store held.
SERVED_WITHIN = ("cfunc",)


class OverloadKernelCache(KernelCache):
    """The kernel cache of one implementation's key: served from this process first."""

    #: Stored as numba compiled it (see the module docstring).
    self_contained_only = False
    #: Its code is all numba's own functions, which the collision detector leaves out of
    #: a kernel's digest: what numba's optimiser makes of them follows what the process
    #: compiled before (the callees linked in as they were optimised then).
    ir_digested = False

    def __init__(self, context, key):
        super().__init__(context, key, source=None)
        self._verification = SERVE_EVERY_HIT  # with no digest, there is nothing to compare

    def sources(self) -> list[Source]:
        return [Source(self._served_in_this_process, reads_store=False), *super().sources()]

    def _served_in_this_process(self, sig, target_context) -> Hit | None:
        compiled = session.current().overloads.get((self._key.digest, str(sig)))
        if compiled is None:
            return None
        # Without the compile's metadata, as a kernel loaded from a cache comes: numba
        # writes each dispatcher's compile timers into it, once.
        return Hit(compiled._replace(metadata=None), stored_entry=None,
                   serve=lambda: report.record_reuse("overload"))

    def _loaded_from_store(self, sig, compiled) -> None:
        super()._loaded_from_store(sig, compiled)
        session.current().overloads[(self._key.digest, str(sig))] = compiled

    def save_overload(self, sig, cres):
        session.current().overloads.setdefault((self._key.digest, str(sig)), cres)
        super().save_overload(sig, cres)


class OverloadCache(StoreCache):
    """The cache object of one implementation's dispatcher: a kernel cache per key, made
    when numba asks, under the flags of the compile asking."""

    def __init__(self, dispatcher):
        self._dispatcher = dispatcher
        self._pending: dict = {}  # signature -> the kernel cache its lookup used

    @property
    def cache_path(self):
        return None

    def load_overload(self, sig, target_context):
        cache = self._kernel_cache(sig)
        if cache is None:
            return None
        self._pending[sig] = cache
        try:
            return cache.load_overload(sig, target_context)
        except Exception as exc:  # numba compiles it, as without the cache
            logger.warning("numba_cache could not look up numba's %s: %r", cache.key.summary, exc)
            return None

    def save_overload(self, sig, cres):
        cache = self._pending.pop(sig, None)
        if cache is None:
            return
        try:
            cache.save_overload(sig, cres)
            # Kernels compiled here link it in as those compiled where it is loaded do.
            numba_internals.link_as_loaded(cres.library)
        except Exception as exc:  # the compile stands, unstored
            logger.warning("numba_cache could not store numba's %s: %r", cache.key.summary, exc)

    def _kernel_cache(self, sig) -> OverloadKernelCache | None:
        from numba_cache.kernels.context import current_context

        if (session.current().this_thread.making_context
                or innermost_kernel_compile() not in SERVED_WITHIN):
            # The self-test's probes, what numba_cache does not compile (PyTensor's NUMBA
            # mode, a user's own numba functions) and what computes a graph's values
            # compile as numba compiles.
            return None
        try:
            context = current_context()
            if not context.enabled:
                return None
            dispatcher = self._dispatcher
            flags = numba_internals.flag_values(numba_internals.compile_flags(dispatcher))
            key = overload_key(dispatcher.py_func, tuple(sig), flags, dict(dispatcher.locals),
                               context.fingerprint)
        except Exception as exc:  # an implementation not keyed compiles as numba compiles it
            logger.debug("numba_cache does not key numba's %s%s: %r",
                         getattr(self._dispatcher.py_func, "__qualname__", "?"), sig, exc)
            return None
        return OverloadKernelCache(context, key)


_numba_jit_decorator = numba_internals.overload_template_class()._get_jit_decorator


def install() -> None:
    """Give every implementation of numba's own that numba builds from now on a cache
    (idempotent)."""
    template = numba_internals.overload_template_class()
    if template._get_jit_decorator is _numba_jit_decorator:
        template._get_jit_decorator = _get_jit_decorator


def _get_jit_decorator(template):
    jitter = _numba_jit_decorator(template)

    def caching_jitter(**options):
        decorate = jitter(**options)

        def decorated(pyfunc):
            dispatcher = decorate(pyfunc)
            if keyed(pyfunc) and not _cached_already(dispatcher):
                numba_internals.set_dispatcher_cache(dispatcher, OverloadCache(dispatcher))
            return dispatcher

        return decorated

    return caching_jitter


def _cached_already(dispatcher) -> bool:
    """Whether `dispatcher` consults a cache of its own (``cache=True`` in the overload's
    jit options): numba's stays."""
    return type(numba_internals.dispatcher_cache(dispatcher)).__name__ != "NullCache"
