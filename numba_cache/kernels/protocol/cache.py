"""The one place where a numba compile turns into a cache lookup.

:class:`KernelCache` is the cache object numba consults on every compile of a
dispatcher: ``load_overload`` before (:mod:`.lookup`), ``save_overload`` after
(:mod:`.storing`). Each kind of kernel has its own: :class:`.OpKernelCache`,
:class:`.GraphKernelCache`, :class:`BlockCache` (an object-mode block's) and
:class:`.CFuncCache` (a C callback's); each lists where its kernel is looked
for, in order (``sources``). One store entry holds one kernel (a key) with one
compiled overload per numba signature, each as its own checksummed blob, like
numba's own index-per-function.

On a miss the entry lock is taken before compiling, so processes compiling the
same key compile it once: the others wait, then load what the first one wrote.
The lock is released when the dispatcher's ``compile`` returns or raises
(:meth:`KernelCache.compiling`). A miss also calls ``prepare`` right before numba
compiles: that is where a graph kernel's globals (op kernels, constants) are
built, so a hit never converts a single op.

Nothing here may make a compile fail: a store fault or an unloadable payload is
reported, counted, repaired and treated as a miss.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from numba.core.caching import _Cache

from numba_cache import session
from numba_cache.kernels.outcomes import replay, report
from numba_cache.kernels.outcomes.uncacheable import Uncacheable
from numba_cache.kernels.protocol.lookup import SERVE_EVERY_HIT, KernelLookup
from numba_cache.kernels.protocol.storing import KernelStorage
from numba_cache.kernels.protocol.verification import HitVerification
from numba_cache.kernels.runtime import blocks as object_mode_blocks
from numba_cache.store import Entry


class StoreCache(_Cache):
    """numba's cache protocol for a cache of numba_cache's store: nothing of numba's own
    cache files to enable, disable or flush."""

    def enable(self):
        pass

    def disable(self):
        pass

    def flush(self):
        pass


class KernelCache(KernelLookup, KernelStorage, StoreCache):
    """numba cache object of one kernel key, backed by the numba_cache store.

    `prepare` is called on a miss, right before numba compiles; it may return an
    :class:`Uncacheable` verdict (e.g. a graph whose op kernel is uncacheable).
    `verdict` is a verdict known before compiling.

    Here are numba's protocol, the locks, the verdict and `prepare`; the lookup is
    :class:`.KernelLookup`'s, the storing :class:`.KernelStorage`'s.
    """

    #: Whether the kernel is an object-mode block's, stored with its environment.
    object_mode = False
    #: Whether only code calling nothing but its own copies of what it links is stored
    #: (:mod:`.self_contained`).
    self_contained_only = True
    #: Whether the digest of its IR is stored, for the collision detector to compare.
    ir_digested = True
    #: The name of a graph kernel's generated function: its IR is digested without it
    #: (:func:`.ir_digest.ir_digest`).
    _function_name: str | None = None

    def __init__(self, context, key, source: str | None, prepare: Callable | None = None,
                 verdict: Uncacheable | None = None):
        self._context = context
        self._key = key
        self._source = source
        self._prepare = prepare
        self._verdict = verdict
        self._verdict_is_stored = False
        #: The verdict came from `prepare`, which may run before numba's lookup: that
        #: lookup is then still a miss (a marker in the store would decide otherwise).
        self._verdict_from_prepare = False
        self._verdict_reported = False
        self._prepared = False
        self._entry: Entry | None = None
        #: The warnings of `prepare` (a graph's conversion), stored with the entry.
        self._warnings: list[dict] = []
        self._held_locks: list[list] = []
        self._verification = (HitVerification(context.settings) if context.settings.verify_hits
                              else SERVE_EVERY_HIT)

    @property
    def key(self):
        return self._key

    @property
    def verdict(self) -> Uncacheable | None:
        """Why this kernel is not stored, once that is known."""
        return self._verdict

    @property
    def cache_path(self):
        return str(self._context.store.root)

    @contextlib.contextmanager
    def compiling(self):
        """Scope of one ``Dispatcher.compile`` call: under the flags its key was made with
        (:func:`.context.flags_in_force`); releases locks taken on a miss, and writes the
        bookkeeping of its loads together."""
        from numba_cache.kernels.context import flags_in_force

        frame: list = []
        self._held_locks.append(frame)
        try:
            with (kernel_compile(self._key.kind), flags_in_force(self._context),
                  self._context.store.bookkeeping_together()):
                yield
        finally:
            self._held_locks.pop()
            for lock in reversed(frame):
                lock.__exit__(None, None, None)

    @property
    def _persistent(self) -> bool:
        unkeyable = self._verdict is not None and self._verdict.reason == "unkeyable"
        return self._context.enabled and not unkeyable

    def _report_verdict(self) -> None:
        """Count and log this kernel's verdict, once, whenever it became known."""
        if not self._verdict_reported:
            self._verdict_reported = True
            report.uncacheable(self._context, self._key, self._verdict)

    def prepare_now(self) -> None:
        """Run `prepare` before numba asks: on a miss, a graph converts when PyTensor's does."""
        self._run_prepare()

    def _run_prepare(self):
        if self._prepare is None or self._prepared:
            return
        self._prepared = True
        with replay.recording() as self._warnings:
            verdict = self._prepare()
        if verdict is not None and self._verdict is None:
            self._verdict, self._verdict_from_prepare = verdict, True
            self._report_verdict()

    def _store_blocks_compiled_here(self, blocks: list[str]) -> None:
        """Store the blocks among `blocks` that this process compiled and has not stored
        (:func:`.blocks.compiled_here_unstored`): the kernel holding them is stored."""
        for dispatcher, signature, compiled in object_mode_blocks.compiled_here_unstored(blocks):
            block_key = object_mode_blocks.block_key(self._context, dispatcher, signature)
            BlockCache(self._context, block_key, object_mode_blocks.environment_reads(dispatcher)
                       ).save_overload(signature, compiled)


@contextlib.contextmanager
def kernel_compile(kind: str):
    """The scope of a compile of one of numba_cache's kernels of `kind` in this thread:
    numba's implementations compiled meanwhile, outside a kernel compiled within it, are
    those it calls (:mod:`.overload_cache`)."""
    this_thread = session.current().this_thread
    outer = this_thread.kernel_compiles
    this_thread.kernel_compiles = (*outer, kind)
    try:
        yield
    finally:
        this_thread.kernel_compiles = outer


def innermost_kernel_compile() -> str | None:
    """The kind of the innermost compile of numba_cache's kernels in progress in this
    thread, or None."""
    compiles = session.current().this_thread.kernel_compiles
    return compiles[-1] if compiles else None


class BlockCache(KernelCache):
    """The cache of an object-mode block's kernel (:mod:`.objmode`), whose code reads the
    globals `reads` (:func:`.blocks.environment_reads`): stored with its environment, and
    holding no block itself."""

    object_mode = True
    #: A block's IR is calls into Python's C API, which numba's optimiser arranges
    #: differently from one process to the next: its code is the Python its environment
    #: holds, keyed with the block.
    ir_digested = False

    def __init__(self, context, key, reads: list[str]):
        super().__init__(context, key, source=None)
        self._reads = reads

    def _environment_reads(self) -> list[str]:
        return self._reads

    def _blocks_held(self, llvm_ir: str, blobs: dict) -> list[str]:
        return []
