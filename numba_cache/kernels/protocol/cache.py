"""The one place where a numba compile turns into a cache lookup.

:class:`KernelCache` is the cache object numba consults on every compile of a
dispatcher (``load_overload`` before, ``save_overload`` after). One store entry
holds one kernel (a key) with one compiled overload per numba signature, each as
its own checksummed blob, like numba's own index-per-function.

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
from numba_cache.kernels.runtime import blocks as object_mode_blocks
from numba_cache.kernels.outcomes import collisions, replay, report
from numba_cache.kernels.helpers import compile_ahead
from numba_cache.kernels.assembly import op_links
from numba_cache.kernels.runtime import numba_runtime as runtime
from numba_cache.kernels.protocol import stored_library
from numba_cache.kernels.protocol.serialize import dump_compile_result, load_compile_result
from numba_cache.kernels.outcomes.uncacheable import Uncacheable, inspect_compile_result
from numba_cache.store import Entry, entry_layout


class KernelCache(_Cache):
    """numba cache object of one kernel key, backed by the numba_cache store.

    `prepare` is called on a miss, right before numba compiles; it may return an
    :class:`Uncacheable` verdict (e.g. a graph whose op kernel is uncacheable).
    `verdict` is a verdict known before compiling. `object_mode` marks the kernel
    of an object-mode block (see :mod:`.objmode`), stored with its environment.
    `op_calls` is filled, while a graph kernel compiles, with the op kernels it calls
    by symbol (:mod:`.op_links`); they are stored with it and loaded before it.
    `function_name` is a graph kernel's generated function's: its IR is digested
    without it (:func:`.collisions.ir_digest`).

    A graph kernel may also be known by its code (:meth:`also_by_code`, once its ops
    are converted): the store's code index names the graph kernel last stored with
    that code, which serves a miss of this graph's own key (and is stored under it).

    `linked` is a graph kernel's :class:`.linked_build.LinkedBuild` under the
    ``link_in_background`` setting: its linked build, when stored, serves first;
    otherwise this kernel serves, and the linked one is asked for. The collision
    detector, which compiles this kernel to compare, serves this kernel only.
    """

    def __init__(self, context, key, source: str | None, prepare: Callable | None = None,
                 verdict: Uncacheable | None = None, object_mode: bool = False,
                 op_calls: list | None = None, function_name: str | None = None,
                 linked=None):
        self._context = context
        self._linked = None if context.settings.verify_hits else linked
        #: The signatures the linked build was looked up for and missed.
        self._linked_missed: set = set()
        self._linked_prefetched: Entry | None = None
        self._linked_stored = False  # when prefetched
        self._op_calls = op_calls
        self._function_name = function_name
        self._code_key = None
        self._object_mode = object_mode
        self._key = key
        self._source = source
        self._prepare = prepare
        self._verdict = verdict
        self._verdict_is_stored = False
        #: The verdict came from `prepare`, which may run before numba's lookup: that
        #: lookup is then still a miss (a marker in the store would decide otherwise).
        self._verdict_from_prepare = False
        self._verdict_reported = False
        self._unmet_reported = False
        self._prepared = False
        self._entry: Entry | None = None
        self._prefetched: Entry | None = None
        #: The warnings of `prepare` (a graph's conversion), stored with the entry.
        self._warnings: list[dict] = []
        self._held_locks: list[list] = []
        #: Entries of hits being verified (:mod:`.collisions`), by numba signature.
        self._verifying: dict = {}

    @property
    def key(self):
        return self._key

    @property
    def served_key(self):
        """The key of the kernel this cache serves: the linked build's, if it was stored
        when :meth:`prefetch` looked (:mod:`.linked_build`), else :attr:`key`."""
        return self._linked.key if self._linked_stored else self._key

    @property
    def verdict(self) -> Uncacheable | None:
        """Why this kernel is not stored, once that is known."""
        return self._verdict

    @property
    def cache_path(self):
        return str(self._context.store.root)

    def also_by_code(self, code_key) -> None:
        """Look a miss up, and index what is compiled, by `code_key` too (or not, if None)."""
        self._code_key = code_key

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

    def load_overload(self, sig, target_context):
        if self._key.kind == "op":
            loaded = op_links.compiled(self._key.digest, sig)
            if loaded is not None:  # loaded for a graph kernel that calls it by symbol
                if self._verify_loaded_op(sig):
                    return None
                report.record_reuse("op")
                self._store_if_missing(sig, loaded)
                return loaded
        if not self._persistent:
            if self._verdict is not None and not self._verdict_from_prepare:
                self._report_verdict()
            self._run_prepare()
            return None
        runtime.initialize(self._context, target_context)
        if self._linked is not None and self._verdict is None:
            cres = self._load_linked(sig, target_context)
            if cres is not None:
                return cres
        fingerprint = self._context.fingerprint.digest
        entry, self._prefetched = self._prefetched, None
        if entry is None:
            entry = self._context.store.load(fingerprint, self._key.digest)
        cres = self._load_from(entry, sig, target_context)
        if cres is None and self._verdict is None and self._held_locks:
            lock = self._context.store.lock(fingerprint, self._key.digest)
            lock.__enter__()
            self._held_locks[-1].append(lock)
            # Another process may have compiled it while we waited for the lock.
            entry = self._context.store.load(fingerprint, self._key.digest)
            cres = self._load_from(entry, sig, target_context)
        by_code = False
        if cres is None and self._code_key is not None and self._verdict is None:
            entry, cres = self._load_by_code(sig, target_context)
            by_code = cres is not None
        if cres is not None:
            if not by_code:
                self._report_hit(sig)
            if self._key.kind == "op":  # the code graph kernels call, even if verified below
                op_links.note(self._key.digest, sig, cres, from_store=True)
            if self._context.settings.verify_hits and collisions.sampled(self._context.settings):
                self._verifying[sig] = entry
                self._run_prepare()
                return None  # numba compiles; save_overload compares
            self._served(sig)
            return cres
        if self._verdict is not None and not self._verdict_from_prepare:
            self._report_verdict()
        else:
            report.record(self._context, f"{self._key.kind}.miss")
            report.lookup(self._context, self._key, "miss")
        self._run_prepare()
        return None

    def _load_by_code(self, sig, target_context) -> tuple[Entry | None, object]:
        """The entry of another graph kernel of this one's code, and its kernel for `sig`;
        ``(None, None)`` if there is none. A hit is stored under this graph's key too,
        for processes that will not convert its ops, and indexed by its code."""
        store, fingerprint = self._context.store, self._context.fingerprint.digest
        other = store.graph_of_code(fingerprint, self._code_key.digest)
        if other is None or other == self._key.digest:
            return None, None
        entry = store.load(fingerprint, other)
        if (entry is None or not entry.cacheable or entry.kind != "graph"
                or entry_layout.overload_blob_name(sig) not in entry.blobs):
            return None, None
        cres = self._met_and_rebuilt(entry, sig, target_context)
        if cres is None:
            return None, None
        report.record(self._context, "graph_by_code.hit")
        report.lookup(self._context, self._key, "hit")
        existing = self._entry
        blobs = dict(existing.blobs) if existing is not None and existing.cacheable else {}
        blobs.update(_overload_blobs(entry.blobs, sig))
        self._save(cacheable=True, verdict=None, blobs=blobs)
        store.record_graph_of_code(fingerprint, self._code_key.digest, self._key.digest)
        return entry, cres

    def _load_linked(self, sig, target_context):
        """The linked build of this graph kernel for `sig` (:mod:`.linked_build`), or None."""
        context, key = self._context, self._linked.key
        entry, self._linked_prefetched = self._linked_prefetched, None
        if entry is None:
            entry = context.store.load(context.fingerprint.digest, key.digest)
        cres = None
        if (entry is not None and entry.cacheable
                and entry_layout.overload_blob_name(sig) in entry.blobs):
            cres = self._met_and_rebuilt(entry, sig, target_context)
        if cres is None:
            self._linked_missed.add(sig)
            return None
        report.record(context, "graph.hit")
        report.record(context, "linking:served")
        report.lookup(context, key, "hit")
        return cres

    def _served(self, sig) -> None:
        """This kernel serves `sig`, stored: ask for its linked build, if it was missed."""
        if sig in self._linked_missed:
            self._linked.request(sig)

    def _report_hit(self, sig) -> None:
        """Count a load from the store: a hit, or the miss it is when a helper of this
        compile compiled it (:mod:`.compile_ahead`)."""
        kind = self._key.kind
        if compile_ahead.compiled_ahead(kind, self._key.digest, sig):
            # A forked helper cannot reach every remote tier: its work is published here.
            self._context.store.publish_stored(self._context.fingerprint.digest,
                                               self._key.digest)
            if kind == "op":
                report.record(self._context, "op.miss")
            # A block is compiled with its kernel, uncounted: so is one compiled ahead.
            report.record(self._context, f"{kind}.compiled_ahead")
            report.lookup(self._context, self._key, "miss")
            return
        report.record(self._context, f"{self._key.kind}.hit")
        report.lookup(self._context, self._key, "hit")

    def _store_if_missing(self, sig, compiled) -> None:
        """Store an op kernel compiled in this process for another store (the settings
        changed since): graph kernels stored here will call it."""
        if (self._persistent and not op_links.loaded_from_store(self._key.digest, sig)
                and not self._context.store.has(self._context.fingerprint.digest,
                                                self._key.digest)):
            self.save_overload(sig, compiled)

    def _verify_loaded_op(self, sig) -> bool:
        """Whether to verify the op kernel a graph kernel's links loaded from the store
        (:mod:`.collisions`): numba then compiles it, and `save_overload` compares."""
        if not (self._persistent and self._context.settings.verify_hits
                and op_links.loaded_from_store(self._key.digest, sig)
                and collisions.sampled(self._context.settings)):
            return False
        entry = self._context.store.load(self._context.fingerprint.digest, self._key.digest)
        if entry is None or not entry.cacheable:
            return False
        self._entry = self._verifying[sig] = entry
        self._run_prepare()
        return True

    def _report_verdict(self) -> None:
        """Count and log this kernel's verdict, once, whenever it became known."""
        if not self._verdict_reported:
            self._verdict_reported = True
            report.uncacheable(self._context, self._key, self._verdict)

    def _load_from(self, entry: Entry | None, sig, target_context):
        self._entry = entry
        if entry is None:
            return None
        if not entry.cacheable:
            self._verdict = Uncacheable(entry.reason or "unknown", entry.components.get("detail", ""))
            self._verdict_is_stored = True
            self._verdict_from_prepare = False
            return None
        return self._met_and_rebuilt(entry, sig, target_context)

    def _met_and_rebuilt(self, entry: Entry, sig, target_context):
        """The kernel of a cacheable `entry` for `sig`, once the op kernels it calls are
        loaded (:mod:`.op_links`); None if they cannot all be."""
        links = entry.blobs.get(entry_layout.op_links_blob_name(sig))
        if links is not None:
            unmet = op_links.meet(self._context, links, target_context, self._load_op)
            if unmet is not None:
                if not self._unmet_reported:  # numba may look twice (again under the lock)
                    self._unmet_reported = True
                    report.unmet_links(self._context, self._key, unmet)
                return None
        return rebuild(self._context, entry, sig, target_context)

    def _load_op(self, entry: Entry, sig, target_context):
        """An op kernel a graph kernel calls, from its entry; counted as that op's hit."""
        compiled = rebuild(self._context, entry, sig, target_context) if entry.cacheable else None
        if compiled is not None:
            report.record(self._context, "op.hit")
        return compiled

    def prefetch(self) -> Entry | None:
        """The stored entry, read ahead of numba's first lookup (which then uses it); the
        linked build's, if it is stored (:mod:`.linked_build`)."""
        if not self._persistent:
            return None
        fingerprint = self._context.fingerprint.digest
        if self._linked is not None and self._verdict is None:
            self._linked_prefetched = self._context.store.load(fingerprint, self._linked.key.digest)
            self._linked_stored = (self._linked_prefetched is not None
                                   and self._linked_prefetched.cacheable)
        if self._linked_stored:  # it serves: its conversion's warnings are told
            return self._linked_prefetched
        self._prefetched = self._context.store.load(fingerprint, self._key.digest)
        return self._prefetched

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
        if self._key.kind == "op":
            op_links.note(self._key.digest, sig, cres)
        if not self._persistent or self._verdict_is_stored:
            return
        verdict, llvm_ir = self._verdict, None
        served = self._verifying.pop(sig, None)
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
            self._entry = None  # removed: none of its overloads may be kept
            if self._key.kind == "op":
                op_links.note(self._key.digest, sig, cres, replace=True)
        if verdict is None:
            llvm_ir = llvm_ir or cres.library.get_llvm_str()
            verdict = inspect_compile_result(cres, llvm_ir, self._object_mode)
        if verdict is not None:
            if self._verdict is None:
                self._verdict = verdict
            self._report_verdict()
            self._save(cacheable=False, verdict=verdict, blobs={})
            self._verdict_is_stored = True
            return
        existing = self._entry
        blobs = dict(existing.blobs) if existing is not None and existing.cacheable else {}
        blobs[entry_layout.ir_digest_blob_name(sig)] = entry_layout.encode_digest(
            collisions.ir_digest(llvm_ir, self._function_name))
        blocks = [] if self._object_mode else object_mode_blocks.named_blocks(
            llvm_ir, *entry_layout.decode_blocks(blobs.get(entry_layout.BLOCKS_BLOB)))
        # A large graph's IR text is megabytes: let it go before the payload is made.
        del llvm_ir
        try:
            blobs[entry_layout.overload_blob_name(sig)] = dump_compile_result(
                cres, keep_environment=self._object_mode)
            blobs[entry_layout.symbols_blob_name(sig)] = stored_library.defined_symbols(
                cres.library)
        except Exception as exc:
            verdict = Uncacheable("unserializable", f"numba could not serialize it: {exc!r}")
            report.uncacheable(self._context, self._key, verdict)
            return
        if self._op_calls:
            blobs[entry_layout.op_links_blob_name(sig)] = op_links.encode(self._op_calls)
        if self._object_mode:
            self._save(cacheable=True, verdict=None, blobs=blobs)
            return
        object_mode_blocks.note_blocks(blocks)
        if blocks:
            blobs[entry_layout.BLOCKS_BLOB] = entry_layout.encode_blocks(blocks)
        self._save(cacheable=True, verdict=None, blobs=blobs)
        if self._code_key is not None:
            self._context.store.record_graph_of_code(
                self._context.fingerprint.digest, self._code_key.digest, self._key.digest)
        self._served(sig)
        for dispatcher, signature, compiled in object_mode_blocks.compiled_here_unstored(blocks):
            block_key = object_mode_blocks.block_key(self._context, dispatcher, signature)
            KernelCache(self._context, block_key, source=None, object_mode=True).save_overload(
                signature, compiled)

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


def _overload_blobs(blobs: dict, sig) -> dict:
    """The blobs of one signature's overload among a kernel entry's `blobs`, with the
    object-mode blocks it names (and, for lack of a way to tell, any other's)."""
    return {name: blobs[name] for name in entry_layout.overload_blob_names(sig) if name in blobs}


def rebuild(context, entry: Entry, sig, target_context):
    """The compile result of `entry` for `sig`, or None; an entry that cannot be loaded
    is removed (reported and counted as corrupt)."""
    payload = entry.blobs.get(entry_layout.overload_blob_name(sig))
    if payload is None:
        return None
    try:
        object_mode_blocks.note_blocks(object_mode_blocks.named_blocks(
            *entry_layout.decode_blocks(entry.blobs.get(entry_layout.BLOCKS_BLOB))))
        return load_compile_result(payload, target_context,
                                   entry.blobs.get(entry_layout.symbols_blob_name(sig)))
    except Exception as exc:  # any failure to rebuild means the entry is unusable
        report.remove_corrupt(context, entry.key, f"entry {entry.key[:12]} ({entry.summary}), "
                              f"its kernel could not be loaded: {exc!r}; recompiling",
                              stacklevel=3)
        return None
