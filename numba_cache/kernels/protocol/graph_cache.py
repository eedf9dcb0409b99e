"""The cache of a graph kernel (level 2): its linked build, its own entry, another graph's code.

A graph kernel's entry lists the op kernels it calls by symbol (:mod:`.op_links`):
they are loaded before it, or it is not loaded. Once its ops are converted, a
graph kernel is also known by its code (:meth:`GraphKernelCache.also_by_code`):
the store's code index names the graph kernel last stored with that code, which
serves a miss of this graph's own key (and is stored under it). A code key made
without converting (:mod:`.remembered_op_keys`) serves only a graph kernel stored
(:meth:`GraphKernelCache.found_by_code`).

Under the ``link_in_background`` setting, the graph's linked build
(:mod:`.linked_build`), when stored, serves first; otherwise this kernel serves,
and the linked build is asked for. The collision detector, which compiles this
kernel to compare, serves this kernel only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from numba_cache.kernels.assembly import op_links
from numba_cache.kernels.outcomes import report
from numba_cache.kernels.protocol import lookup
from numba_cache.kernels.protocol.cache import KernelCache
from numba_cache.kernels.protocol.lookup import Hit, Source
from numba_cache.store import Entry, entry_layout


class GraphKernelCache(KernelCache):
    """numba cache object of one graph kernel's key.

    `op_calls` is filled, while the graph kernel compiles, with the op kernels it
    calls by symbol; they are stored with it. `function_name` is its generated
    function's. `linked` is its :class:`.linked_build.LinkedBuild`, or None.
    """

    def __init__(self, context, key, source: str, prepare, verdict, op_calls: list,
                 function_name: str, linked):
        super().__init__(context, key, source, prepare=prepare, verdict=verdict)
        self._op_calls = op_calls
        self._function_name = function_name
        self._code_key = None
        #: The graph kernel of another key, of this one's code, read by found_by_code.
        self._by_code: Entry | None = None
        self._prefetched: Entry | None = None
        self._unmet_reported = False
        self._linked = None if context.settings.verify_hits else linked
        #: The signatures the linked build was looked up for and missed.
        self._linked_missed: set = set()
        self._linked_prefetched: Entry | None = None
        self._linked_stored = False  # when prefetched
        self._begin_compile: Callable | None = None
        self._end_compile: Callable | None = None

    def compiles_with(self, begin: Callable, end: Callable) -> None:
        """Have ``begin(sig)`` called when numba is about to compile this graph kernel for
        `sig`, its lookup missed (as a helper compiling ahead starts, :mod:`.compile_ahead`),
        and ``end()`` once that compile is over, however it ends."""
        self._begin_compile, self._end_compile = begin, end

    def load_overload(self, sig, target_context):
        compiled = super().load_overload(sig, target_context)
        if compiled is None and self._begin_compile is not None:
            self._begin_compile(sig)
        return compiled

    @contextlib.contextmanager
    def compiling(self):
        try:
            with super().compiling():
                yield
        finally:
            if self._end_compile is not None:
                self._end_compile()

    def sources(self) -> list[Source]:
        return [
            Source(self._linked_build),  # the linked build, under link_in_background
            Source(self._own_entry),  # the entry under its key, prefetched or read now
            Source(self._own_entry_under_lock),  # again, once a process compiling it is done
            Source(self._same_code),  # the entry of another graph kernel of its code
        ]

    @property
    def served_key(self):
        """The key of the kernel this cache serves: the linked build's, if it was stored
        when :meth:`prefetch` looked (:mod:`.linked_build`), else :attr:`key`."""
        return self._linked.key if self._linked_stored else self._key

    def also_by_code(self, code_key) -> None:
        """Look a miss up, and index what is compiled, by `code_key` too (or not, if None)."""
        self._code_key, self._by_code = code_key, None

    def found_by_code(self, code_key) -> Entry | None:
        """The stored graph kernel the code index names for `code_key`, read ahead for the
        lookup it then serves (:meth:`_same_code`), or None (nothing changes then).
        For a code key made without converting this graph's ops: a miss converts them."""
        if not self._persistent or self._verdict is not None:
            return None
        entry = self._entry_of_code(code_key)
        if entry is not None:
            self._code_key, self._by_code = code_key, entry
        return entry

    def _entry_of_code(self, code_key) -> Entry | None:
        """The stored graph kernel of another key the code index names for `code_key`."""
        store, fingerprint = self._context.store, self._context.fingerprint.digest
        other = store.graph_of_code(fingerprint, code_key.digest)
        if other is None or other == self._key.digest:
            return None
        entry = store.load(fingerprint, other)
        if entry is None or not entry.cacheable or entry.kind != "graph":
            return None
        return entry

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

    def _read_own_entry(self) -> Entry | None:
        entry, self._prefetched = self._prefetched, None
        return entry if entry is not None else super()._read_own_entry()

    def _linked_build(self, sig, target_context) -> Hit | None:
        if self._linked is None or self._verdict is not None:
            return None
        context, key = self._context, self._linked.key
        entry, self._linked_prefetched = self._linked_prefetched, None
        if entry is None:
            entry = context.store.load(context.fingerprint.digest, key.digest)
        compiled = None
        if (entry is not None and entry.cacheable
                and entry_layout.overload_blob_name(sig) in entry.blobs):
            compiled = self._rebuilt(entry, sig, target_context)
        if compiled is None:
            self._linked_missed.add(sig)
            return None
        report.record(context, "graph.hit")
        report.record(context, "linking:served")
        report.lookup(context, key, "hit")
        return Hit(compiled, stored_entry=None)

    def _same_code(self, sig, target_context) -> Hit | None:
        """The kernel for `sig` of the graph kernel the code index names for this one's
        code. A hit is stored under this graph's key too, for processes that will not
        convert its ops, and indexed by its code."""
        if self._code_key is None or self._verdict is not None:
            return None
        store, fingerprint = self._context.store, self._context.fingerprint.digest
        remembered, self._by_code = self._by_code, None
        entry = remembered if remembered is not None else self._entry_of_code(self._code_key)
        if entry is None or entry_layout.overload_blob_name(sig) not in entry.blobs:
            return None
        compiled = self._rebuilt(entry, sig, target_context)
        if compiled is None:
            return None
        report.record(self._context, "graph_by_code.hit")
        if remembered is not None:
            report.record(self._context, "op_keys.remembered")
        report.lookup(self._context, self._key, "hit")
        blobs = self._existing_blobs()
        blobs.update(_overload_blobs(entry.blobs, sig))
        self._save(cacheable=True, verdict=None, blobs=blobs)
        store.record_graph_of_code(fingerprint, self._code_key.digest, self._key.digest)
        return Hit(compiled, stored_entry=lambda: entry, serve=lambda: self._served(sig))

    def _rebuilt(self, entry: Entry, sig, target_context):
        """The kernel of `entry` for `sig`, once the op kernels it calls are loaded
        (:mod:`.op_links`); None if they cannot all be."""
        links = entry.blobs.get(entry_layout.op_links_blob_name(sig))
        if links is not None:
            unmet = op_links.meet(self._context, links, target_context, self._load_op)
            if unmet is not None:
                if not self._unmet_reported:  # numba may look twice (again under the lock)
                    self._unmet_reported = True
                    report.unmet_links(self._context, self._key, unmet)
                return None
        return lookup.rebuild(self._context, entry, sig, target_context)

    def _load_op(self, entry: Entry, sig, target_context):
        """An op kernel this graph kernel calls, from its entry; counted as that op's hit."""
        compiled = (lookup.rebuild(self._context, entry, sig, target_context)
                    if entry.cacheable else None)
        if compiled is not None:
            report.record(self._context, "op.hit")
        return compiled

    def _served(self, sig) -> None:
        """Ask for the linked build of `sig`, if it was missed."""
        if sig in self._linked_missed:
            self._linked.request(sig)

    def _calls_blobs(self, sig) -> dict:
        if not self._op_calls:
            return {}
        return {entry_layout.op_links_blob_name(sig): op_links.encode(self._op_calls)}

    def _stored(self, sig) -> None:
        if self._code_key is not None:
            self._context.store.record_graph_of_code(
                self._context.fingerprint.digest, self._code_key.digest, self._key.digest,
                far=True)
        self._served(sig)


def _overload_blobs(blobs: dict, sig) -> dict:
    """The blobs of one signature's overload among a kernel entry's `blobs`, with the
    object-mode blocks it names (and, for lack of a way to tell, any other's)."""
    return {name: blobs[name] for name in entry_layout.overload_blob_names(sig) if name in blobs}
