"""The one place where a numba compile turns into a cache lookup.

:class:`KernelCache` is the cache object numba consults on every compile of a
dispatcher (``load_overload`` before, ``save_overload`` after); each kind of
kernel has its own (:class:`.OpKernelCache`, :class:`.GraphKernelCache`,
:class:`BlockCache`, :class:`.CFuncCache`), which lists where its kernel is
looked for (:meth:`KernelCache.sources`, :mod:`.lookup`). One store entry holds
one kernel (a key) with one compiled overload per numba signature, each as its
own checksummed blob, like numba's own index-per-function.

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
import time
from collections.abc import Callable

from numba.core.caching import _Cache

from numba_cache._compat import numba_internals
from numba_cache.kernels.helpers import compile_ahead
from numba_cache.kernels.outcomes import collisions, replay, report
from numba_cache.kernels.outcomes.uncacheable import Uncacheable, inspect_compile_result
from numba_cache.kernels.protocol import lookup, stored_library
from numba_cache.kernels.protocol.lookup import Hit, Source
from numba_cache.kernels.protocol.serialize import dump_compile_result
from numba_cache.kernels.protocol.verification import HitVerification
from numba_cache.kernels.runtime import blocks as object_mode_blocks
from numba_cache.kernels.runtime import numba_runtime as runtime
from numba_cache.store import Entry, entry_layout


class KernelCache(_Cache):
    """numba cache object of one kernel key, backed by the numba_cache store.

    `prepare` is called on a miss, right before numba compiles; it may return an
    :class:`Uncacheable` verdict (e.g. a graph whose op kernel is uncacheable).
    `verdict` is a verdict known before compiling.
    """

    #: Whether the kernel is an object-mode block's, stored with its environment.
    object_mode = False
    #: The name of a graph kernel's generated function: its IR is digested without it
    #: (:func:`.collisions.ir_digest`).
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
        self._verification = HitVerification(context.settings)

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

    def enable(self):
        pass

    def disable(self):
        pass

    def flush(self):
        pass

    @contextlib.contextmanager
    def compiling(self):
        """Scope of one ``Dispatcher.compile`` call: releases locks taken on a miss."""
        frame: list = []
        self._held_locks.append(frame)
        try:
            yield
        finally:
            self._held_locks.pop()
            for lock in reversed(frame):
                lock.__exit__(None, None, None)

    @property
    def _persistent(self) -> bool:
        unkeyable = self._verdict is not None and self._verdict.reason == "unkeyable"
        return self._context.enabled and not unkeyable

    def sources(self) -> list[Source]:
        """Where this kernel is looked for, in order."""
        return [
            Source(self._own_entry),  # the entry under its key
            Source(self._own_entry_under_lock),  # again, once a process compiling it is done
        ]

    def load_overload(self, sig, target_context):
        hit = self._lookup(sig, target_context)
        if hit is None:
            self._report_miss()
        elif not self._verification.takes(hit, sig):
            hit.serve()
            return hit.compiled
        self._run_prepare()  # numba compiles: a verified hit is compared in save_overload
        return None

    def _lookup(self, sig, target_context) -> Hit | None:
        """The first hit of :meth:`sources`; the store is read only for a persistent kernel."""
        store_ready = False
        for source in self.sources():
            if source.reads_store and not store_ready:
                if not self._persistent:
                    return None
                runtime.initialize(self._context, target_context)  # stored code calls it
                store_ready = True
            hit = source.find(sig, target_context)
            if hit is not None:
                return hit
        return None

    def _report_miss(self) -> None:
        if self._verdict is not None and not self._verdict_from_prepare:
            self._report_verdict()
        elif self._persistent:
            report.record(self._context, f"{self._key.kind}.miss")
            report.lookup(self._context, self._key, "miss")

    def _own_entry(self, sig, target_context) -> Hit | None:
        return self._stored_hit(self._read_own_entry(), sig, target_context)

    def _own_entry_under_lock(self, sig, target_context) -> Hit | None:
        if self._verdict is not None or not self._held_locks:
            return None
        fingerprint = self._context.fingerprint.digest
        lock = self._context.store.lock(fingerprint, self._key.digest)
        lock.__enter__()
        self._held_locks[-1].append(lock)
        entry = self._context.store.load(fingerprint, self._key.digest)
        return self._stored_hit(entry, sig, target_context)

    def _read_own_entry(self) -> Entry | None:
        return self._context.store.load(self._context.fingerprint.digest, self._key.digest)

    def _stored_hit(self, entry: Entry | None, sig, target_context) -> Hit | None:
        compiled = self._load_from(entry, sig, target_context)
        if compiled is None:
            return None
        self._loaded_from_store(sig, compiled)
        return Hit(compiled, stored_entry=lambda: entry, serve=lambda: self._served(sig))

    def _load_from(self, entry: Entry | None, sig, target_context):
        """The kernel of this kernel's own `entry` for `sig`, or None; a stored marker
        makes its verdict this kernel's."""
        self._entry = entry
        if entry is None:
            return None
        if not entry.cacheable:
            self._verdict = Uncacheable(entry.reason or "unknown", entry.components.get("detail", ""))
            self._verdict_is_stored = True
            self._verdict_from_prepare = False
            return None
        return self._rebuilt(entry, sig, target_context)

    def _rebuilt(self, entry: Entry, sig, target_context):
        """The kernel of a cacheable `entry` for `sig`, or None."""
        return lookup.rebuild(self._context, entry, sig, target_context)

    def _loaded_from_store(self, sig, compiled) -> None:
        """Count a load from the store: a hit, or the miss it is when a helper of this
        compile compiled it (:mod:`.compile_ahead`)."""
        kind = self._key.kind
        if compile_ahead.compiled_ahead(kind, self._key.digest, sig):
            # A forked helper cannot reach every remote tier: its work is published here.
            self._context.store.publish_stored(self._context.fingerprint.digest,
                                               self._key.digest)
            self._count_compiled_ahead()
            report.lookup(self._context, self._key, "miss")
            return
        report.record(self._context, f"{kind}.hit")
        report.lookup(self._context, self._key, "hit")

    def _count_compiled_ahead(self) -> None:
        # A block is compiled with its kernel, uncounted: so is one compiled ahead.
        report.record(self._context, f"{self._key.kind}.compiled_ahead")

    def _served(self, sig) -> None:
        """What this kernel serving `sig`, stored, entails besides (nothing here)."""

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

    def save_overload(self, sig, cres):
        compile_ahead.note_save(self._key.kind, self._key.digest, sig)
        if not self._persistent or self._verdict_is_stored:
            return
        verdict, llvm_ir = self._verdict, None
        served = self._verification.pending(sig)
        if (served is not None or verdict is None) and not numba_internals.inspectable(
                cres.library):
            # Code loaded from a cache (numba's own, or a block from this store) was not
            # compiled here: its IR cannot be read, so it can be neither checked nor stored.
            return
        if served is not None:
            llvm_ir = cres.library.get_llvm_str()
            if collisions.served_code_matches(self._context, self._key, served, sig, llvm_ir,
                                              self._function_name):
                return
            self._collided(sig, cres)
        if verdict is None:
            llvm_ir = llvm_ir or cres.library.get_llvm_str()
            verdict = inspect_compile_result(cres, llvm_ir, self.object_mode)
        if verdict is not None:
            if self._verdict is None:
                self._verdict = verdict
            self._report_verdict()
            self._save(cacheable=False, verdict=verdict, blobs={})
            self._verdict_is_stored = True
            return
        blobs = self._existing_blobs()
        blobs[entry_layout.ir_digest_blob_name(sig)] = entry_layout.encode_digest(
            collisions.ir_digest(llvm_ir, self._function_name))
        blocks = self._blocks_held(llvm_ir, blobs)
        # A large graph's IR text is megabytes: let it go before the payload is made.
        del llvm_ir
        self._store_compiled(sig, cres, blobs, blocks)

    def _collided(self, sig, cres) -> None:
        """The entry served for `sig` held another kernel's code: it was removed."""
        self._entry = None  # none of its overloads may be kept

    def _existing_blobs(self) -> dict:
        existing = self._entry
        return dict(existing.blobs) if existing is not None and existing.cacheable else {}

    def _blocks_held(self, llvm_ir: str, blobs: dict) -> list[str]:
        """The object-mode blocks of this kernel (:mod:`.blocks`): those its IR names, and
        those of its overloads already in `blobs`."""
        return object_mode_blocks.named_blocks(
            llvm_ir, *entry_layout.decode_blocks(blobs.get(entry_layout.BLOCKS_BLOB)))

    def _store_compiled(self, sig, cres, blobs: dict, blocks: list[str]) -> None:
        try:
            blobs[entry_layout.overload_blob_name(sig)] = dump_compile_result(
                cres, keep_environment=self.object_mode)
            blobs[entry_layout.symbols_blob_name(sig)] = stored_library.defined_symbols(
                cres.library)
        except Exception as exc:
            verdict = Uncacheable("unserializable", f"numba could not serialize it: {exc!r}")
            report.uncacheable(self._context, self._key, verdict)
            return
        blobs.update(self._calls_blobs(sig))
        object_mode_blocks.note_blocks(blocks)
        if blocks:
            blobs[entry_layout.BLOCKS_BLOB] = entry_layout.encode_blocks(blocks)
        self._save(cacheable=True, verdict=None, blobs=blobs)
        self._stored(sig)
        for dispatcher, signature, compiled in object_mode_blocks.compiled_here_unstored(blocks):
            block_key = object_mode_blocks.block_key(self._context, dispatcher, signature)
            BlockCache(self._context, block_key).save_overload(signature, compiled)

    def _calls_blobs(self, sig) -> dict:
        """Blobs naming what the kernel for `sig` calls, to be loaded before it."""
        return {}

    def _stored(self, sig) -> None:
        """What storing the kernel for `sig` entails besides (nothing here)."""

    def _save(self, cacheable: bool, verdict: Uncacheable | None, blobs: dict):
        components = dict(self._key.components)
        if verdict is not None:
            components["detail"] = verdict.detail
        if cacheable and self._warnings:  # an uncacheable kernel converts, and warns, every time
            blobs = blobs | {
                entry_layout.WARNINGS_BLOB: entry_layout.encode_warnings(self._warnings)}
        entry = Entry(
            key=self._key.digest,
            fingerprint=self._context.fingerprint.digest,
            kind=self._key.kind,
            summary=self._key.summary,
            components=components,
            cacheable=cacheable,
            reason=None if verdict is None else verdict.reason,
            created=time.time(),
            blobs=blobs,
        )
        self._context.store.save(entry, source=self._source)


class BlockCache(KernelCache):
    """The cache of an object-mode block's kernel (:mod:`.objmode`): stored with its
    environment, and holding no block itself."""

    object_mode = True

    def __init__(self, context, key):
        super().__init__(context, key, source=None)

    def _blocks_held(self, llvm_ir: str, blobs: dict) -> list[str]:
        return []
