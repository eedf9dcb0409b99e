"""What is done to a store apart from lookups and saves: listings, stats, clearing,
eviction, verification, copying records in and out.

:class:`Maintenance` is a base of :class:`~.store.Store`, kept apart as ccache keeps
cleanup and statistics apart from lookup; it works through the store's backend,
index and locks (named below) and its ``lock``, ``read``, ``_may_write``,
``_remove_unless_locked`` and ``_after_new``.
"""

from __future__ import annotations

import errno
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from ..settings import Settings
from . import record, stats
from .entry import Entry, check_address, check_name
from .eviction import evict
from .index import Index
from .local import LocalBackend, stored_size
from .locks import EntryLocks, LockBusy
from .notices import warn_cannot_delete, warn_once
from .record import CorruptEntry
from .verify import Problem, verify

EVICTION_LOCK_NAME = "evict.lock"


class Maintenance:
    """The maintenance half of a store (see the module docstring)."""

    settings: Settings
    root: Path
    readonly: bool
    _backend: LocalBackend
    _index: Index
    _locks: EntryLocks

    def record_of(self, fingerprint: str, key: str) -> tuple[bytes, bytes | None] | None:
        """The entry's record as stored and its ``.py`` copy (None if it has none),
        or None if there is no entry; for copying an entry elsewhere (export).

        The record is checked first: an unreadable one raises :class:`CorruptEntry`
        (or OSError), so a broken entry is never copied. Records no use.
        """
        check_address(fingerprint, key)
        data = self._backend.get(fingerprint, key)
        if data is None:
            return None
        record.decode(data, fingerprint, key)
        return data, self._backend.read_source(fingerprint, key)

    def add_record(self, fingerprint: str, key: str, data: bytes, source: str | None) -> bool:
        """Store a record made elsewhere (import) unless a readable entry holds the key.

        Returns True if it was stored, False if the store already had a readable
        entry for the key, which is never replaced. Raises :class:`CorruptEntry` if
        `data` is not a valid record of (`fingerprint`, `key`), so a broken record
        never reaches the store, and OSError if it cannot be written (or the store is
        read-only). Runs under the entry's lock, like a compile of the key.
        """
        entry = record.decode(data, fingerprint, key)
        if not self._may_write():
            raise OSError(errno.EROFS, f"the cache {self.root} is read-only")
        with self.lock(fingerprint, key):
            try:
                if self.read(fingerprint, key) is not None:
                    return False
            except (CorruptEntry, OSError):
                pass  # a broken entry: the valid record replaces it
            self._backend.clean_temp()
            self._backend.put(fingerprint, key, data, source)
            self._index.insert(entry, stored_size(data, source), time.time())
        self._after_new(entry, data, source)
        return True

    def entries(self, fingerprint: str | None = None, kind: str | None = None) -> list[Entry]:
        """The entries (metadata only, no blobs), least recently used first."""
        if fingerprint is not None:
            check_name("fingerprint", fingerprint)
        listing = self._index.rows(fingerprint, kind)
        if listing is None:  # no usable index: the files tell everything but use
            found = (entry for entry in self._scan(fingerprint) if kind in (None, entry.kind))
            listing = sorted(found, key=lambda entry: (entry.last_used, entry.key))
        return listing

    def stats(self, fingerprint: str | None = None) -> dict:
        """Entries, bytes, kinds and counters, in total and per fingerprint.

        Keys: ``root``, ``max_size``, ``readonly``, ``entries``, ``bytes``, ``kinds``
        (cacheable entries per kind), ``uncacheable`` (markers), ``counters`` (name to
        value) and ``fingerprints`` (fingerprint to a dict of the same five figures).
        """
        figures = stats.summarize(self.entries(fingerprint), self._index.counters(fingerprint))
        return {"root": str(self.root), "max_size": self.settings.max_size,
                "readonly": self.readonly} | figures

    def clear(self, fingerprint: str | None = None) -> int:
        """Delete every entry (of one fingerprint) and orphaned source copies.

        Counters stay (see :meth:`zero_counters`). Returns how many entries were
        deleted; a failure to delete files is warned and ends the clearing.
        """
        if fingerprint is not None:
            check_name("fingerprint", fingerprint)
        if not self._may_write():
            return 0
        deleted: list[tuple[str, str]] = []
        try:
            for fingerprint_, key, _, _ in list(self._backend.list(fingerprint)):
                self._backend.remove(fingerprint_, key)
                deleted.append((fingerprint_, key))
            for fingerprint_, _, path in self._backend.orphan_sources():
                if fingerprint in (None, fingerprint_):
                    path.unlink(missing_ok=True)
        except OSError as error:
            warn_cannot_delete(self.root, error)
            self._index.drop(deleted)
        else:
            self._index.clear(fingerprint)
        return len(deleted)

    def zero_counters(self) -> None:
        if self._may_write():
            self._index.zero_counters()

    def evict_to(
        self,
        max_bytes: int | None,
        timeout: float | None = None,
        *,
        last_used_before: float | None = None,
        dry_run: bool = False,
    ) -> list[tuple[str, str]]:
        """Delete least recently used entries until the store holds at most `max_bytes`.

        With `last_used_before` (a time), entries last used before it go too; either
        limit may be None. Runs under the store's eviction lock, waiting for it up to
        `timeout` seconds (default ``settings.lock_timeout``; 0 gives up at once if
        another process is evicting). Entries whose lock is held are skipped: they
        are being compiled or written. A reader is never broken, since it reads an
        entry in one open. Also removes temp files of dead writers. Returns the
        evicted ``(fingerprint, key)`` pairs, least recently used first. With
        `dry_run`, deletes nothing (and takes no lock): returns what would go.
        """
        if dry_run:
            planned = evict(*self._by_last_use(), max_bytes, last_used_before, lambda entry: True)
            return [(entry.fingerprint, entry.key) for entry in planned]
        if not self._may_write():
            return []
        if timeout is None:
            timeout = self.settings.lock_timeout
        try:
            store_lock = self._locks.acquire(self.root / EVICTION_LOCK_NAME, timeout)
        except LockBusy:
            return []
        if store_lock is None:
            return []
        evicted: list[tuple[str, str]] = []

        def remove(entry: Entry) -> bool:
            if not self._remove_unless_locked(entry.fingerprint, entry.key):
                return False
            evicted.append((entry.fingerprint, entry.key))
            return True

        try:
            self._backend.clean_temp()
            evict(*self._by_last_use(), max_bytes, last_used_before, remove)
        except OSError as error:
            warn_once(("evict", str(self.root)), f"numba_cache: eviction in {self.root}: {error}")
        finally:
            store_lock.release()
            for fingerprint, n in Counter(fingerprint for fingerprint, _ in evicted).items():
                self._index.count(fingerprint, "eviction", n)
        return evicted

    def _by_last_use(self) -> tuple[list[Entry], int]:
        """The entries, least recently used first, and their total size: the index keeps
        the total; without a usable index, the files tell both."""
        listing, total = self.entries(), self._index.total_size()
        return listing, total if total is not None else sum(entry.size for entry in listing)

    def verify(self, repair: bool = False) -> list[Problem]:
        """Check every entry file, source copy, temp file and index row; see :func:`verify.verify`.

        With `repair` (ignored when read-only), fix what was found.
        """
        return verify(self._backend, self._index, repair=repair and self._may_write())

    def _scan(self, fingerprint: str | None = None) -> Iterator[Entry]:
        """The decodable entries on disk, without blobs, last used when written."""
        for fingerprint_, key, size, mtime in self._backend.list(fingerprint):
            try:
                data = self._backend.get(fingerprint_, key)
                if data is None:
                    continue
                entry = record.decode(data, fingerprint_, key)
            except (CorruptEntry, OSError):
                continue
            entry.blobs, entry.size, entry.last_used = {}, size, mtime
            yield entry
