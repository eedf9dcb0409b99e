"""The :class:`Store` facade: the only API the rest of numba_cache uses."""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from ..settings import Settings
from . import checkpoints, locks, record
from .entry import KINDS, Entry, check_address, check_name
from .eviction import EVICTION_TARGET, evict
from .index import Index
from .local import LocalBackend, make_private_dirs, may_write_under, warn_if_writable_by_others
from .notices import warn_once
from .record import CorruptEntry
from .remote import RemoteConfigError, RemoteTier, open_tier
from .side_files import SideFiles
from .verify import Problem, verify

INDEX_NAME = "index.sqlite3"
EVICTION_LOCK_NAME = "evict.lock"
#: errno values of a disk that refuses writes: full, over quota, failing, read-only.
_DISK_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


class Store:
    """Compiled kernels on disk, under ``settings.root``.

    Nothing is created until the first write. Loads and saves never raise for I/O
    trouble: a corrupt or unreadable entry is a miss, a failed write returns False,
    each with one :class:`StoreWarning` per process. The store is read-only when
    ``settings.readonly`` is set or when its root is not writable, or cannot be
    created (below a regular file, in a directory that is not writable).

    With ``settings.remote`` set, a shared server is the second level
    (:mod:`.remote`): a local miss is looked up there and a hit written back
    locally; a saved entry is published there.
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.root = Path(settings.root)
        self.readonly = settings.readonly or not may_write_under(self.root)
        self._backend = LocalBackend(self.root)
        self._index = Index(
            self.root / INDEX_NAME,
            readonly=self.readonly,
            scan=self._scan,
            on_disk_failure=self._warn_cannot_write,
        )
        warn_if_writable_by_others(self.root)
        self._side_files = SideFiles(self._backend, self.root,
                                     lambda: not (self.settings.disabled or self.readonly))
        self.remote = self._open_remote()
        # Entry locks this thread holds: a save or removal inside a compile of the same
        # key must not wait for its own lock (a second flock on the path would).
        self._thread = threading.local()

    def load(self, fingerprint: str, key: str) -> Entry | None:
        """The entry with its blobs, or None if there is none (or it is corrupt).

        A hit updates the entry's last use and hit count; hits and misses are
        counted by the caller with :meth:`count`, which knows what it was looking for. A corrupt entry is
        removed, counted as "corrupt" and reported once per process. A record this
        process may not read is a miss, warned once per store. An uncacheable
        marker is returned like any entry, with ``cacheable`` False.
        """
        check_address(fingerprint, key)
        if self.settings.disabled:
            return None
        try:
            data = self._backend.get(fingerprint, key)
            if data is None:
                if not self.readonly and self._index.has(fingerprint, key):
                    self._drop_row_unless_locked(fingerprint, key)
                return self._load_remote(fingerprint, key)
            entry = record.decode(data, fingerprint, key)
        except PermissionError as error:  # not damage: nothing to count or remove
            warn_once(
                ("read", str(self.root)),
                f"numba_cache: cannot read the cache {self.root} ({error}); compiling without it.",
            )
            return None
        except (CorruptEntry, OSError) as problem:
            self._discard_corrupt(fingerprint, key, problem)
            return None
        # The .py copy is the "source" blob, so this is what the entry occupies.
        entry.size = len(data) + len(entry.blobs.get("source", b""))
        if not self.readonly:
            self._index.record_hit(entry, entry.size, time.time())
        return entry

    def read(self, fingerprint: str, key: str) -> Entry | None:
        """The entry with its blobs as stored, or None if there is none; for inspection.

        Unlike :meth:`load`, it neither records a use nor counts, repairs or warns:
        an unreadable record raises :class:`CorruptEntry` (or OSError) for the
        caller to report. ``size`` is filled as in a listing.
        """
        check_address(fingerprint, key)
        data = self._backend.get(fingerprint, key)
        if data is None:
            return None
        entry = record.decode(data, fingerprint, key)
        entry.size = len(data) + len(self._backend.read_source(fingerprint, key) or b"")
        return entry

    def save(self, entry: Entry, source: str | None = None) -> bool:
        """Store `entry`, and `source` as a readable ``.py`` copy; True if it was stored.

        Does nothing and returns False when the store is disabled or read-only, or
        when writing fails (full disk, I/O error, permissions), which is warned once
        per process and counted as "write_error". Removes the temp files of writers
        that died first, and evicts least recently used entries after, if the store
        outgrew ``settings.max_size``. Writes under the entry's lock (see :meth:`lock`),
        so that an eviction never takes a record from under its index row. Raises
        ValueError only for an invalid `entry` (see :func:`record.encode`).
        """
        if self.settings.disabled or not self._may_write():
            return False
        data = record.encode(entry)
        with self.lock(entry.fingerprint, entry.key):
            try:
                # A writer killed mid-write left its temp file; writers clean up after it.
                self._backend.clean_temp()
                self._backend.put(entry.fingerprint, entry.key, data, source)
            except OSError as error:
                self.report_write_error(entry.fingerprint, error)
                return False
            checkpoints.reached("before-index")
            self._index.insert(entry, _size(data, source), time.time())
        self._after_new(entry, data, source)
        return True

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
        if self.settings.disabled or not self._may_write():
            raise OSError(errno.EROFS, f"the cache {self.root} is read-only or disabled")
        with self.lock(fingerprint, key):
            try:
                if self.read(fingerprint, key) is not None:
                    return False
            except (CorruptEntry, OSError):
                pass  # a broken entry: the valid record replaces it
            self._backend.clean_temp()
            self._backend.put(fingerprint, key, data, source)
            self._index.insert(entry, _size(data, source), time.time())
        self._after_new(entry, data, source)
        return True

    def _after_new(self, entry: Entry, data: bytes, source: str | None) -> None:
        """Publish an entry just written and indexed, then evict if the store outgrew its
        maximum size."""
        if self.remote is not None:
            self.remote.publish(entry.fingerprint, entry.key, data, source)
        total = self._index.total_size()
        if total is not None and total > self.settings.max_size:
            self.evict_to(int(self.settings.max_size * EVICTION_TARGET), timeout=0)

    def report_write_error(self, fingerprint: str, error: OSError) -> None:
        """Count a failed write as "write_error" and warn, once per process for the store.

        For the store's own writes, and for files written into it on its behalf.
        """
        self._warn_cannot_write(error)
        self.count(fingerprint, "write_error")

    @contextlib.contextmanager
    def lock(self, fingerprint: str, key: str) -> Iterator[bool]:
        """Hold the entry's lock for the block, so that one process compiles a key at a time.

        Use as ``with store.lock(fp, key): if store.load(fp, key) is None: compile, save``.
        The lock is an ``flock`` on ``<fingerprint>/locks/<key>.lock``: the kernel
        releases it when its holder exits, even by SIGKILL, so a dead compiler never
        blocks the others. If the lock cannot be had within ``settings.lock_timeout``
        (warned) or cannot be created at all (read-only store, permissions), the
        block runs without it: a cache must never make a compile fail. Yields whether
        the lock is held. Reentrant within a thread: a block inside a block holding
        the same key's lock runs at once.
        """
        check_address(fingerprint, key)
        held_here = self._held_locks()
        if (fingerprint, key) in held_here:
            yield True
            return
        held = None
        if not (self.settings.disabled or self.readonly):
            try:
                held = self._acquire(self._lock_path(fingerprint, key), self.settings.lock_timeout)
            except locks.LockBusy:
                warn_once(
                    ("lock timeout", fingerprint, key),
                    f"numba_cache: waited {self.settings.lock_timeout:g} s for another process "
                    f"compiling {key[:12]}; compiling it here too.",
                )
        if held is not None:
            held_here.add((fingerprint, key))
        try:
            yield held is not None
        finally:
            if held is not None:
                held_here.discard((fingerprint, key))
                held.release()

    def _held_locks(self) -> set[tuple[str, str]]:
        held = getattr(self._thread, "held", None)
        if held is None:
            held = self._thread.held = set()
        return held

    def count(self, fingerprint: str, name: str, n: int = 1) -> None:
        """Add `n` to the counter `name` of `fingerprint` ("miss", "uncacheable:<reason>"...)."""
        check_name("fingerprint", fingerprint)
        if not self.settings.disabled and self._may_write():
            self._index.count(fingerprint, name, n)

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
        per_fingerprint: dict[str, dict] = {}

        def figures_of(fingerprint_: str) -> dict:
            empty = {"entries": 0, "bytes": 0, "kinds": dict.fromkeys(KINDS, 0)}
            empty |= {"uncacheable": 0, "counters": {}}
            return per_fingerprint.setdefault(fingerprint_, empty)

        for entry in self.entries(fingerprint):
            figures = figures_of(entry.fingerprint)
            figures["entries"] += 1
            figures["bytes"] += entry.size
            if entry.cacheable:
                figures["kinds"][entry.kind] += 1
            else:
                figures["uncacheable"] += 1
        for fingerprint_, values in self._index.counters(fingerprint).items():
            figures_of(fingerprint_)["counters"] = values
        kinds, counters = Counter(), Counter()
        for figures in per_fingerprint.values():
            kinds.update(figures["kinds"])
            counters.update(figures["counters"])
        return {
            "root": str(self.root),
            "max_size": self.settings.max_size,
            "readonly": self.readonly,
            "entries": sum(figures["entries"] for figures in per_fingerprint.values()),
            "bytes": sum(figures["bytes"] for figures in per_fingerprint.values()),
            "kinds": {kind: kinds[kind] for kind in KINDS},
            "uncacheable": sum(figures["uncacheable"] for figures in per_fingerprint.values()),
            "counters": dict(counters),
            "fingerprints": per_fingerprint,
        }

    def remove(self, fingerprint: str, key: str) -> None:
        """Delete one entry; a failure to delete its files is warned, never raised."""
        check_address(fingerprint, key)
        if not self._may_write():
            return
        with self.lock(fingerprint, key):
            try:
                self._delete(fingerprint, key)
            except OSError as error:
                self._warn_cannot_delete(error)

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
            self._warn_cannot_delete(error)
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
            planned = evict(self.entries(), max_bytes, last_used_before, lambda entry: True)
            return [(entry.fingerprint, entry.key) for entry in planned]
        if self.settings.disabled or not self._may_write():
            return []
        if timeout is None:
            timeout = self.settings.lock_timeout
        try:
            store_lock = self._acquire(self.root / EVICTION_LOCK_NAME, timeout)
        except locks.LockBusy:
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
            evict(self.entries(), max_bytes, last_used_before, remove)
        except OSError as error:
            warn_once(("evict", str(self.root)), f"numba_cache: eviction in {self.root}: {error}")
        finally:
            store_lock.release()
            for fingerprint, n in Counter(fingerprint for fingerprint, _ in evicted).items():
                self._index.count(fingerprint, "eviction", n)
        return evicted

    def verify(self, repair: bool = False) -> list[Problem]:
        """Check every entry file, source copy, temp file and index row; see :func:`verify.verify`.

        With `repair` (ignored when read-only), fix what was found.
        """
        return verify(self._backend, self._index, repair=repair and self._may_write())

    def record_fingerprint(self, fingerprint: str, components: dict) -> None:
        """Keep the components of `fingerprint` beside its entries (:mod:`.side_files`)."""
        self._side_files.record_fingerprint(fingerprint, components)

    def fingerprint_components(self, fingerprint: str) -> dict | None:
        return self._side_files.fingerprint_components(fingerprint)

    def completed_registry(self, fingerprint: str, partial: str) -> str | None:
        return self._side_files.completed_registry(fingerprint, partial)

    def record_completed_registry(self, fingerprint: str, partial: str, complete: str) -> None:
        self._side_files.record_completed_registry(fingerprint, partial, complete)

    def source_path(self, fingerprint: str, key: str) -> Path:
        """Where the readable ``.py`` copy of an entry's source is (or would be) kept."""
        check_address(fingerprint, key)
        return self._backend.source_path(fingerprint, key)

    def _remove_unless_locked(self, fingerprint: str, key: str) -> bool:
        """Delete an entry's files and index row under its lock, unless someone else holds
        it (compiling or writing the entry): then False, and nothing is deleted.

        The row goes with the files while the lock is held, so that a writer taking the
        lock next never has its fresh row dropped, nor a row left without its record.
        """
        if (fingerprint, key) in self._held_locks():
            return False  # this thread is writing it
        try:
            entry_lock = self._acquire(self._lock_path(fingerprint, key), 0)
        except locks.LockBusy:
            return False
        if entry_lock is None:
            return False
        try:
            self._delete(fingerprint, key)
        finally:
            entry_lock.release()
        return True

    def _drop_row_unless_locked(self, fingerprint: str, key: str) -> None:
        """Drop the index row of an entry found without its record, unless a writer holds
        its lock: that writer is about to put the record and its row in place."""
        if (fingerprint, key) in self._held_locks():
            self._index.drop([(fingerprint, key)])
            return
        try:
            entry_lock = self._acquire(self._lock_path(fingerprint, key), 0)
        except locks.LockBusy:
            return
        try:
            self._index.drop([(fingerprint, key)])
        finally:
            if entry_lock is not None:
                entry_lock.release()

    def _delete(self, fingerprint: str, key: str) -> None:
        """Delete an entry's files, then its index row; call holding the entry's lock."""
        self._backend.remove(fingerprint, key)
        self._index.drop([(fingerprint, key)])

    def _open_remote(self) -> RemoteTier | None:
        """The remote tier of the settings, or None (warned once) if it cannot start."""
        if self.settings.remote is None or self.settings.disabled:
            return None
        try:
            return open_tier(self.settings, self.count)
        except RemoteConfigError as problem:
            warn_once(("remote config", self.settings.remote), f"numba_cache: {problem}")
            return None

    def _load_remote(self, fingerprint: str, key: str) -> Entry | None:
        """The entry from the remote tier, written back locally; None on a miss."""
        if self.remote is None:
            return None
        fetched = self.remote.fetch(
            fingerprint, key, lambda data: record.decode(data, fingerprint, key)
        )
        if fetched is None:
            return None
        entry, data, source = fetched
        entry.size = len(data) + len(source)
        if self.readonly:
            return entry
        try:
            # Not through save: the entry came from the server, it goes back to no server.
            text = source.decode(errors="replace") if source else None
            self._backend.put(fingerprint, key, data, text)
        except OSError as error:
            self.report_write_error(fingerprint, error)
            return entry
        self._index.insert(entry, entry.size, time.time())
        return entry

    def _discard_corrupt(self, fingerprint: str, key: str, problem: Exception) -> None:
        warn_once(
            ("corrupt", str(self.root), fingerprint, key),
            f"numba_cache: ignoring the unreadable cache entry {key[:12]} in {self.root} "
            f"({problem}); it will be compiled again.",
        )
        self.count(fingerprint, "corrupt")
        if self.readonly:
            return
        with contextlib.suppress(OSError):
            if (fingerprint, key) in self._held_locks():
                self._delete(fingerprint, key)
            else:  # whoever holds the lock is writing the entry anew: the record is theirs
                self._remove_unless_locked(fingerprint, key)

    def _warn_cannot_write(self, error: Exception) -> None:
        """The one warning a process gets when the store's disk refuses writes, whichever
        write (record, index, lock, generated source) meets it first."""
        warn_once(
            ("write", str(self.root)),
            f"numba_cache: cannot write to the cache {self.root} ({error}); "
            "compiled kernels are not being saved.",
        )

    def _warn_cannot_delete(self, error: OSError) -> None:
        warn_once(("delete", str(self.root)), f"numba_cache: cannot delete in {self.root}: {error}")

    def _may_write(self) -> bool:
        """Whether writing is allowed; the first refusal in a process is warned."""
        if self.readonly:
            why = "readonly setting" if self.settings.readonly else "the directory is not writable"
            warn_once(
                ("readonly", str(self.root)),
                f"numba_cache: the cache {self.root} is read-only ({why}): "
                "cached kernels are loaded, nothing is saved or counted.",
            )
        return not self.readonly

    def _acquire(self, path: Path, timeout: float):
        """The lock at `path` (see :func:`.locks.acquire`), acquired within `timeout` seconds.

        Raises :class:`.locks.LockBusy` when someone else holds it; returns None
        (warned once) when it cannot be created: as a failed write if the disk refused.
        """
        try:
            make_private_dirs(self.root)
            path.parent.mkdir(parents=True, exist_ok=True)
            return locks.acquire(path, timeout)
        # NotImplementedError is how filelock < 4 says the filesystem has no flock.
        except (OSError, NotImplementedError) as error:
            if getattr(error, "errno", None) in _DISK_FAILURES:
                self._warn_cannot_write(error)
            else:
                warn_once(
                    ("lock", str(self.root)),
                    f"numba_cache: cannot create the lock {path} ({error}); "
                    "going on without locking.",
                )
            return None

    def _lock_path(self, fingerprint: str, key: str) -> Path:
        return self.root / fingerprint / "locks" / f"{key}.lock"

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


def _size(data: bytes, source: str | None) -> int:
    """What an entry occupies: its record and its ``.py`` copy."""
    return len(data) + (len(source.encode()) if source is not None else 0)


