"""The cache of an op kernel (level 3): the code this process serves for it comes first.

Graph kernels call op kernels by symbol (:mod:`.op_links`), so this process keeps
one compile result per op kernel and signature: the one loaded for a stored graph
kernel, or the first compiled here. A dispatcher made later for the same op
serves that one, even if the store now holds another.
"""

from __future__ import annotations

from numba_cache.kernels.assembly import op_links
from numba_cache.kernels.outcomes import report
from numba_cache.kernels.protocol.cache import KernelCache
from numba_cache.kernels.protocol.lookup import Hit, Source
from numba_cache.store import Entry, entry_layout


class OpKernelCache(KernelCache):
    """numba cache object of one op kernel's key."""

    _prefetched: tuple | None = None  # (signature, entry) read by :meth:`holds`

    def holds(self, sig) -> bool:
        """Whether serving `sig` will load this op kernel rather than compile it: this
        process serves it, or its stored entry has code for `sig`. The entry read here
        is the one the lookup for `sig` that follows uses (read once)."""
        if op_links.compiled(self._key.digest, sig) is not None:
            return True
        entry = self._context.store.load(self._context.fingerprint.digest, self._key.digest)
        self._prefetched = (sig, entry)
        return (entry is not None and entry.cacheable
                and entry_layout.overload_blob_name(sig) in entry.blobs)

    def sources(self) -> list[Source]:
        return [
            # Loaded, or compiled, in this process for a graph kernel calling it by symbol.
            Source(self._served_in_this_process, reads_store=False),
            Source(self._own_entry),  # the entry under its key
            Source(self._own_entry_under_lock),  # again, once a process compiling it is done
        ]

    def _served_in_this_process(self, sig, target_context) -> Hit | None:
        compiled = op_links.compiled(self._key.digest, sig)
        if compiled is None:
            return None
        # Only what was loaded from the store can be compared with a compile of it.
        loaded = self._persistent and op_links.loaded_from_store(self._key.digest, sig)
        return Hit(compiled, stored_entry=self._cacheable_entry if loaded else None,
                   serve=lambda: self._reused(sig, compiled))

    def _own_entry(self, sig, target_context) -> Hit | None:
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] == sig:  # an entry or None, just read
            return self._stored_hit(prefetched[1], sig, target_context)
        return super()._own_entry(sig, target_context)

    def _cacheable_entry(self) -> Entry | None:
        entry = self._context.store.load(self._context.fingerprint.digest, self._key.digest)
        if entry is None or not entry.cacheable:
            return None
        self._entry = entry
        return entry

    def _reused(self, sig, compiled) -> None:
        report.record_reuse("op")
        self._store_if_missing(sig, compiled)

    def _store_if_missing(self, sig, compiled) -> None:
        """Store an op kernel compiled in this process for another store (the settings
        changed since): graph kernels stored here will call it."""
        if (self._persistent and not op_links.loaded_from_store(self._key.digest, sig)
                and not self._context.store.has(self._context.fingerprint.digest,
                                                self._key.digest)):
            self.save_overload(sig, compiled)

    def _loaded_from_store(self, sig, compiled) -> None:
        super()._loaded_from_store(sig, compiled)
        # The code graph kernels call, even if the collision detector compiles it again.
        op_links.note(self._key.digest, sig, compiled, from_store=True)

    def _count_compiled_ahead(self) -> None:
        report.record(self._context, "op.miss")
        super()._count_compiled_ahead()

    def save_overload(self, sig, cres):
        op_links.note(self._key.digest, sig, cres)
        super().save_overload(sig, cres)

    def _collided(self, sig, cres) -> None:
        super()._collided(sig, cres)
        op_links.note(self._key.digest, sig, cres, replace=True)
