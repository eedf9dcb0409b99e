"""A kernel cache's lookup: its sources, in order, the hit one gives, and the base of it.

Each kind of kernel cache lists where its kernel is looked for, in order
(:meth:`KernelLookup.sources`), one line a source; the first :class:`Hit` serves,
unless the collision detector verifies it (:mod:`.verification`). A source reads
this process's own kernels or the store: the store's sources are asked only of a
kernel that is persistent, once numba's runtime is ready for stored code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from numba_cache import session
from numba_cache.kernels.helpers import compile_ahead
from numba_cache.kernels.outcomes import report
from numba_cache.kernels.outcomes.uncacheable import Uncacheable
from numba_cache.kernels.protocol.serialize import load_compile_result
from numba_cache.kernels.runtime import blocks as object_mode_blocks
from numba_cache.kernels.runtime import detached
from numba_cache.kernels.runtime import numba_runtime as runtime
from numba_cache.store import Entry, entry_layout


class Source(NamedTuple):
    """One place a kernel may be found: ``find(signature, target_context) -> Hit | None``."""

    find: Callable
    reads_store: bool = True


def _nothing() -> None:
    """What serving a hit entails when nothing does."""


class Hit(NamedTuple):
    """A compile result a source found."""

    compiled: object
    #: The entry the collision detector compares a new compile with (:mod:`.verification`),
    #: read when it asks (it gives None if that entry is gone); None if this hit is never
    #: verified.
    stored_entry: Callable[[], Entry | None] | None
    #: What serving it, rather than verifying it, entails.
    serve: Callable[[], None] = _nothing


class _ServeEveryHit:
    """What stands for the collision detector (:mod:`.verification`) when ``verify_hits``
    is off: every hit is served."""

    @staticmethod
    def takes(hit: Hit, signature) -> bool:
        return False

    @staticmethod
    def pending(signature) -> None:
        return None


SERVE_EVERY_HIT = _ServeEveryHit()


class KernelLookup:
    """``load_overload`` of :class:`.KernelCache`, whose state it shares: a kernel looked
    up under its own key, in the store."""

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
                runtime.initialize(self._context, target_context)  # from the store too, if there
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
        return rebuild(self._context, entry, sig, target_context)

    def _loaded_from_store(self, sig, compiled) -> None:
        """Count a load from the store: a hit, or the miss it is when a helper of this
        compile compiled it (:mod:`.compile_ahead`)."""
        kind = self._key.kind
        # A warm hit, with no helper's work to look for, asks no helper.
        if (session.current().may_load_work_ahead(kind)
                and compile_ahead.compiled_ahead(kind, self._key.digest, sig)):
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


def rebuild(context, entry: Entry, sig, target_context):
    """The compile result of `entry` for `sig`, or None; an entry that cannot be loaded
    is removed (reported and counted as corrupt)."""
    payload = entry.blobs.get(entry_layout.overload_blob_name(sig))
    if payload is None:
        return None
    try:
        if entry_layout.BLOCKS_BLOB in entry.blobs:
            object_mode_blocks.note_blocks(object_mode_blocks.named_blocks(
                *entry_layout.decode_blocks(entry.blobs[entry_layout.BLOCKS_BLOB])))
        if entry_layout.DETACHED_BLOB in entry.blobs:
            detached.remember(entry.blobs[entry_layout.DETACHED_BLOB])
        return load_compile_result(payload, target_context,
                                   entry.blobs.get(entry_layout.symbols_blob_name(sig)))
    except Exception as exc:  # any failure to rebuild means the entry is unusable
        report.remove_corrupt(context, entry.key, f"entry {entry.key[:12]} ({entry.summary}), "
                              f"its kernel could not be loaded: {exc!r}; recompiling",
                              stacklevel=3)
        return None
