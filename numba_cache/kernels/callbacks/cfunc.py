"""numba C callbacks (``numba.cfunc``) around entry points, stored like kernels.

nutpie wraps a PyTensor function's ``vm.jit_fn`` in two ``numba.cfunc``
callbacks. numba never caches them (they use dynamic globals) and compiles them
in every process: about 3.7 s of numba's own helpers, whatever the model. With
an entry point inside (:mod:`.entry_point`), a callback's machine code names
everything process-specific by symbol, so it can be stored and loaded:

- a *recogniser* (registered with :func:`register_recognizer`) names a callback
  whose Python function it knows completely, with key components and the entry
  points it calls, or returns None; anything not recognised compiles as numba
  compiles it, untouched;
- a recognised callback is compiled self-contained (:mod:`.self_contained`) and
  looked up and stored through a :class:`CFuncCache`, a :class:`.KernelCache`
  that records what the code needs from its process (:mod:`.links`) and loads
  it only where all of that is met.

The numba seam is ``CFunc.__init__`` (wrapped, :func:`install`), ``CFunc._cache``
(the cache object ``CFunc.compile`` consults, as ``numba.cfunc(cache=True)``
sets it) and ``CFunc._compiler.pipeline_class``; ``tests/test_nutpie.py`` fails
loudly if numba moves them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from numba.core import compiler
from numba.core.ccallback import CFunc

from numba_cache.kernels.callbacks import links
from numba_cache.kernels.runtime import numba_runtime as runtime
from numba_cache.kernels.protocol.cache import KernelCache, kernel_compile
from numba_cache.kernels.protocol.self_contained import SelfContainedCompiler
from numba_cache.kernels.outcomes.uncacheable import Uncacheable
from numba_cache.keys.key import Key
from numba_cache.logs import logger
from numba_cache.store import entry_layout

#: ``recognizer(pyfunc) -> (summary, components, entry points) | None``.
Recognizer = Callable[[Callable], "tuple[str, dict, Sequence] | None"]

_recognizers: list[Recognizer] = []
_numba_init = CFunc.__init__


def register_recognizer(recognizer: Recognizer) -> None:
    if recognizer not in _recognizers:
        _recognizers.append(recognizer)


class CFuncCache(KernelCache):
    """The cache of one recognised callback: a kernel cache that checks links before loading."""

    def __init__(self, context, key: Key, entry_points: Sequence):
        super().__init__(context, key, source=None)
        self._entry_points = entry_points
        self._links: links.Links | None = None

    def _load_from(self, entry, sig, target_context):
        if entry is not None and entry.cacheable:
            runtime.initialize(self._context, target_context)  # defines its symbols
            reason = self._unmet(entry)
            if reason is not None:
                logger.debug("cfunc %s not loaded: %s", self.key.short, reason)
                entry = None
        return super()._load_from(entry, sig, target_context)

    def _unmet(self, entry) -> str | None:
        payload = entry.blobs.get(entry_layout.CFUNC_LINKS_BLOB)
        if payload is None:
            return "its links were not recorded"
        try:
            return links.unmet(links.Links.decode(payload), self._entry_points)
        except Exception as exc:  # an unreadable record is a miss, never a failed compile
            return f"its links could not be read: {exc!r}"

    def save_overload(self, sig, cres):
        # numba links a callback's callees when it finalizes it, after this call; as
        # numba's own cache does, link it now (CFunc.compile asks for this pointer next).
        cres.library.get_pointer_to_function(cres.fndesc.llvm_cfunc_wrapper_name)
        try:
            needed = links.required(cres.library, self._entry_points)
        except Exception as exc:  # not knowing what the code needs means not storing it
            needed = Uncacheable("links-unknown", f"its links could not be listed: {exc!r}")
        if isinstance(needed, Uncacheable):
            if self._verdict is None:
                self._verdict = needed
        else:
            self._links = needed
        super().save_overload(sig, cres)

    def _save(self, cacheable, verdict, blobs):
        if cacheable:
            blobs = blobs | {entry_layout.CFUNC_LINKS_BLOB: self._links.encode()}
        super()._save(cacheable, verdict, blobs)


def install() -> None:
    """Give every callback numba builds from now on a chance to be recognised (idempotent)."""
    if CFunc.__init__ is _numba_init:
        CFunc.__init__ = _init


def _init(self, pyfunc, sig, locals, options, pipeline_class=compiler.Compiler):
    _numba_init(self, pyfunc, sig, locals, options, pipeline_class=pipeline_class)
    if pipeline_class is not compiler.Compiler or not _recognizers:
        return
    try:
        cache = _cache_for(pyfunc, self._sig, locals, options)
    except Exception as exc:  # recognising must never make a compile fail
        logger.info("numba_cache does not store the cfunc %s: %r", self.__qualname__, exc)
        return
    if cache is not None:
        self._cache = cache
        self._compiler.pipeline_class = SelfContainedCompiler
        compile_callback = self.compile

        def compile_as_kernel():
            with kernel_compile("cfunc"):
                return compile_callback()

        self.compile = compile_as_kernel


def _cache_for(pyfunc, signature, locals, options) -> CFuncCache | None:
    from numba_cache import versions
    from numba_cache.kernels.context import current_context
    from numba_cache.keys.canonical import canonical

    for recognizer in _recognizers:
        recognised = recognizer(pyfunc)
        if recognised is not None:
            break
    else:
        return None
    summary, components, entry_points = recognised
    context = current_context()
    key = Key.from_components("cfunc", summary, components | {
        "fingerprint": context.fingerprint.digest,
        "codegen": versions.CODEGEN,
        "signature": str(signature),
        "locals": canonical(dict(locals)),
        "options": canonical(dict(options)),
    })
    return CFuncCache(context, key, entry_points)
