"""The :class:`Store` facade, the only API the rest of numba_cache uses: lookups and saves
through the local backend and index, locks, and the remote tier; maintenance (listing,
stats, eviction, verification) is its base :class:`~.maintenance.Maintenance`, the side
files lookups read its base :class:`~.side_files.SideFilesOfStore`."""

from __future__ import annotations

import contextlib
import functools
import time
from pathlib import Path

from ..settings import Settings
from . import checkpoints, record, tier_notes
from .entry import Entry, check_address, check_name
from .entry_layout import SOURCE_BLOB
from .eviction import EVICTION_TARGET
from .index import Index
from .local import (LocalBackend, may_write_under, stored_size, unusable_root,
                    warn_if_writable_by_others)
from .locks import EntryLocks
from .maintenance import Maintenance
from .notices import warn_cannot_delete, warn_cannot_write, warn_once
from .record import CorruptEntry
from .remote import RemoteTier, open_tier_for_store
from .side_files import SideFiles, SideFilesOfStore

INDEX_NAME = "index.sqlite3"


class Store(Maintenance, SideFilesOfStore):
    """Compiled kernels on disk, under ``settings.root`` (``settings.disabled`` is not its
    business: a compile then takes a :class:`.null.NullStore`, a store of nothing).

    Nothing is created until the first write. Loads and saves never raise for I/O
    trouble: a corrupt or unreadable entry is a miss, a failed write returns False,
    each with one :class:`StoreWarning` per process. The store is read-only when
    ``settings.readonly`` is set or when its root is not writable, or cannot be
    created (below a regular file, in a directory that is not writable).

    With ``settings.remote`` set, a shared server is the remote tier
    (:mod:`.remote`): a local miss is looked up there and a hit written back
    locally; a saved entry is published there.
    """

    def __init__(self, settings: Settings):
        self.settings = settings
        self.root = Path(settings.root)
        self.readonly = settings.readonly or not may_write_under(self.root)
        self._backend = LocalBackend(self.root)
        disk_refused = functools.partial(warn_cannot_write, self.root)
        self._index = Index(self.root / INDEX_NAME, readonly=self.readonly, scan=self._scan,
                            exists=self._backend.has, on_disk_failure=disk_refused)
        warn_if_writable_by_others(self.root)
        writable = lambda: not self.readonly
        self._side_files = SideFiles(self._backend, self.root, writable)
        self._locks = EntryLocks(self.root, lock_timeout=settings.lock_timeout, enabled=writable,
                                 on_disk_failure=disk_refused)
        #: ``(fingerprint, key)`` of the entries this process loaded or stored.
        self._used_here: set[tuple[str, str]] = set()
        #: ``(fingerprint, key)`` of entries stored while the remote tier was backing off
        #: after a failure, and the notes (:mod:`.tier_notes`) it did not take then, by
        #: address: published when the server is tried again.
        self._unpublished: set[tuple[str, str]] = set()
        self._unpublished_notes: dict[tuple[str, str], bytes] = {}

    @functools.cached_property
    def remote(self) -> RemoteTier | None:
        """The remote tier, opened at its first use: a process whose lookups all hit
        locally neither reads the secret nor imports the server's client (``redis``
        takes about 0.1 s, as long as a whole warm compile)."""
        return open_tier_for_store(self.settings, self.count)

    def load(self, fingerprint: str, key: str) -> Entry | None:
        """The entry with its blobs, or None if there is none (or it is corrupt).

        A hit updates the entry's last use and hit count; hits and misses are
        counted by the caller with :meth:`count`, which knows what it was looking for. A corrupt entry is
        removed, counted as "corrupt" and reported once per process. A record this
        process may not read is a miss, warned once per store. An uncacheable
        marker is returned like any entry, with ``cacheable`` False.
        """
        check_address(fingerprint, key)
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
        entry.size = len(data) + len(entry.blobs.get(SOURCE_BLOB, b""))
        if not self.readonly:
            self._index.record_hit(entry, entry.size, time.time())
        self._used_here.add((fingerprint, key))
        return entry

    def bookkeeping_together(self) -> contextlib.AbstractContextManager[None]:
        """A block (a compile phase) whose loads' uses and counts are written at its end,
        in one transaction."""
        return (contextlib.nullcontext() if self.readonly
                else self._index.bookkeeping_together())

    def has(self, fingerprint: str, key: str) -> bool:
        """Whether this store holds a record for the entry (not read, not counted as a use)."""
        check_address(fingerprint, key)
        return self._backend.has(fingerprint, key)

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

        Does nothing and returns False when the store is read-only, or
        when writing fails (full disk, I/O error, permissions), which is warned once
        per process and counted as "write_error". Removes the temp files of writers
        that died first, and evicts least recently used entries after, if the store
        outgrew ``settings.max_size``. Writes under the entry's lock (see :meth:`lock`),
        so that an eviction never takes a record from under its index row. Raises
        ValueError only for an invalid `entry` (see :func:`record.encode`).
        """
        if not self._may_write():
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
            self._index.insert(entry, stored_size(data, source), time.time())
        self._used_here.add((entry.fingerprint, entry.key))
        self._after_new(entry, data, source)
        return True

    def _after_new(self, entry: Entry, data: bytes, source: str | None) -> None:
        """Publish an entry just written and indexed, then evict if the store outgrew its
        maximum size."""
        if self.remote is not None:
            self._publish_unpublished()
            self._publish(entry.fingerprint, entry.key, data, source)
        total = self._index.total_size()
        if total is not None and total > self.settings.max_size:
            evicted = self.evict_to(int(self.settings.max_size * EVICTION_TARGET), timeout=0)
            if self._used_here.intersection(evicted):
                warn_once(("too small", str(self.root)),
                          f"numba_cache: the cache {self.root} holds at most "
                          f"{self.settings.max_size:,} bytes (NBCACHE_MAX_SIZE), less than "
                          "this process uses: kernels it stored or loaded were evicted and "
                          "will be compiled again. Raise NBCACHE_MAX_SIZE.")

    def report_write_error(self, fingerprint: str, error: OSError) -> None:
        """Count a failed write as "write_error" and warn, once per process for the store.

        For the store's own writes, and for files written into it on its behalf.
        """
        warn_cannot_write(self.root, error)
        self.count(fingerprint, "write_error")

    def lock(self, fingerprint: str, key: str) -> contextlib.AbstractContextManager[bool]:
        """Hold the entry's lock for the block, so that one process compiles a key at a time:
        ``with store.lock(fp, key): if store.load(fp, key) is None: compile, save``.

        Yields whether the lock is held: if it cannot be had within
        ``settings.lock_timeout`` (warned) or created at all, the block runs without it,
        since a cache must never make a compile fail (see :class:`.locks.EntryLocks`).
        """
        check_address(fingerprint, key)
        return self._locks.hold(fingerprint, key)

    def count(self, fingerprint: str, name: str, n: int = 1) -> None:
        """Add `n` to the counter `name` of `fingerprint` ("miss", "uncacheable:<reason>"...)."""
        check_name("fingerprint", fingerprint)
        if self._may_write():
            self._index.count(fingerprint, name, n)

    def remove(self, fingerprint: str, key: str) -> None:
        """Delete one entry; a failure to delete its files is warned, never raised."""
        check_address(fingerprint, key)
        if not self._may_write():
            return
        with self.lock(fingerprint, key):
            try:
                self._delete(fingerprint, key)
            except OSError as error:
                warn_cannot_delete(self.root, error)

    def _remove_unless_locked(self, fingerprint: str, key: str) -> bool:
        """Delete an entry's files and index row under its lock, unless another process
        holds it (compiling or writing the entry): then False, and nothing is deleted.

        The row goes with the files while the lock is held, so that a writer taking the
        lock next never has its fresh row dropped, nor a row left without its record.
        """
        if self._locks.held_here(fingerprint, key):
            return False  # this thread is writing it
        with self._locks.unless_busy(fingerprint, key, without_lock=False) as free:
            if free:
                self._delete(fingerprint, key)
            return free

    def _drop_row_unless_locked(self, fingerprint: str, key: str) -> None:
        """Drop the index row of an entry found without its record, unless a writer holds
        its lock: that writer is about to put the record and its row in place."""
        with self._locks.unless_busy(fingerprint, key, without_lock=True) as free:
            if free:
                self._index.drop([(fingerprint, key)])

    def _delete(self, fingerprint: str, key: str) -> None:
        """Delete an entry's files, then its index row; call holding the entry's lock."""
        self._backend.remove(fingerprint, key)
        self._index.drop([(fingerprint, key)])

    def _load_remote(self, fingerprint: str, key: str) -> Entry | None:
        """The entry from the remote tier, written back locally; None on a miss."""
        if self.remote is None:
            return None
        self._publish_unpublished()
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

    def publish_stored(self, fingerprint: str, key: str) -> None:
        """Publish an entry a child forked from this process stored, where the remote tier
        cannot be used from such a child (:attr:`.remote.RemoteTier.survives_fork`)."""
        if self.remote is not None and not self.remote.survives_fork:
            self._publish(fingerprint, key)

    def _publish(self, fingerprint: str, key: str, data: bytes | None = None,
                 source: str | None = None) -> None:
        """Publish an entry (read from disk when `data` is None). One the tier does not
        take because it is backing off after a failure, or failing now, is published
        when the server is tried again (:meth:`_publish_unpublished`)."""
        if data is None:
            try:
                found = self.record_of(fingerprint, key)  # checked: damage stays here
            except (CorruptEntry, OSError):
                return  # the next lookup repairs it, and publishes anew
            if found is None:
                return  # evicted meanwhile
            data, stored_source = found
            source = None if stored_source is None else stored_source.decode(errors="replace")
        if (not self.remote.publish(fingerprint, key, data, source,
                                    self.merge_for(fingerprint, key))
                and self.remote.backing_off):
            self._unpublished.add((fingerprint, key))

    def _publish_unpublished(self) -> None:
        """Publish what was stored or noted during a back-off, once the server may be tried
        again; a new failure keeps the rest for the next time. A process that ends first
        leaves them to ``numba-cache publish``."""
        while self._unpublished and not self.remote.backing_off:
            self._publish(*self._unpublished.pop())
        while self._unpublished_notes and not self.remote.backing_off:
            address, note = self._unpublished_notes.popitem()
            self._publish_note_data(*address, note)

    @staticmethod
    def merge_for(fingerprint: str, key: str):
        """How the tier merges this entry into the one a server kept (:func:`record.merged`)."""
        return lambda theirs, ours: record.merged(theirs, ours, fingerprint, key)

    def completed_registry(self, fingerprint: str, partial: str, far: bool = False
                           ) -> str | None:
        """The complete rewrite-registry digest noted for `partial`: beside the entries, or
        else, if `far`, on the remote tier (:mod:`.tier_notes`), then noted locally too."""
        if not far:
            return super().completed_registry(fingerprint, partial)
        return self._side_table(fingerprint, partial, super().completed_registry,
                                super().record_completed_registry,
                                tier_notes.registry_key(partial), tier_notes.REGISTRY)

    def record_completed_registry(self, fingerprint: str, partial: str, complete: str,
                                  far: bool = False) -> None:
        super().record_completed_registry(fingerprint, partial, complete)
        if far:
            self._publish_note(fingerprint, tier_notes.registry_key(partial),
                               tier_notes.REGISTRY, partial, complete)

    def graph_of_code(self, fingerprint: str, code: str) -> str | None:
        """The graph kernel key of code key `code`: beside the entries, or else on the remote
        tier (:mod:`.tier_notes`), then noted locally too."""
        return self._side_table(fingerprint, code, super().graph_of_code,
                                super().record_graph_of_code, tier_notes.code_key(code),
                                tier_notes.CODE)

    def record_graph_of_code(self, fingerprint: str, code: str, key: str,
                             far: bool = False) -> None:
        """Note that graph kernel `key` holds code `code`; if `far` (a graph kernel just
        compiled), on the remote tier too."""
        if super().graph_of_code(fingerprint, code) != key:
            super().record_graph_of_code(fingerprint, code, key)
            if far:
                self._publish_note(fingerprint, tier_notes.code_key(code), tier_notes.CODE,
                                   code, key)

    def op_keys_of(self, fingerprint: str, graph: str) -> list[str] | None:
        """The op kernel keys of lengths-free graph key `graph`: beside the entries, or else
        on the remote tier (:mod:`.tier_notes`), then noted locally too."""
        return self._side_table(fingerprint, graph, super().op_keys_of,
                                super().record_op_keys_of, tier_notes.op_keys_key(graph),
                                tier_notes.OP_KEYS)

    def record_op_keys_of(self, fingerprint: str, graph: str, keys: list[str],
                          far: bool = False) -> None:
        """Note the op kernel keys of lengths-free graph key `graph`; if `far`, on the remote
        tier too."""
        if super().op_keys_of(fingerprint, graph) != keys:
            super().record_op_keys_of(fingerprint, graph, keys)
            if far:
                self._publish_note(fingerprint, tier_notes.op_keys_key(graph),
                                   tier_notes.OP_KEYS, graph, keys)

    def _side_table(self, fingerprint: str, about: str, read, note_here, address: str,
                    kind: tier_notes.NoteKind):
        """A side table's value about `about`: ``read`` locally, or else fetched from the
        tier's note at `address` and kept locally by ``note_here``."""
        value = read(fingerprint, about)
        if value is None and self.remote is not None:
            fetched = self.remote.fetch(fingerprint, address, functools.partial(kind.decode, about))
            if fetched is not None:
                value = fetched[0]
                note_here(fingerprint, about, value)
        return value

    def _publish_note(self, fingerprint: str, address: str, kind: tier_notes.NoteKind,
                      about: str, value) -> None:
        if self.remote is not None and not self.readonly:
            self._publish_note_data(fingerprint, address, kind.encode(about, value))

    def _publish_note_data(self, fingerprint: str, address: str, note: bytes) -> None:
        """Publish a note; one the tier does not take because it is backing off is kept
        for :meth:`_publish_unpublished`, as entries are."""
        if (not self.remote.publish(fingerprint, address, note, None)
                and self.remote.backing_off):
            self._unpublished_notes[(fingerprint, address)] = note

    def source_path(self, fingerprint: str, key: str) -> Path:
        """Where the readable ``.py`` copy of an entry's source is (or would be) kept."""
        check_address(fingerprint, key)
        return self._backend.source_path(fingerprint, key)

    def vouch(self, fingerprint: str, components: dict) -> None:
        """Publish to the remote tier, if any, that the self-test passed for `fingerprint`
        (:mod:`.tier_notes`)."""
        if self.remote is not None:
            self._publish_note_data(fingerprint, tier_notes.VOUCH_KEY,
                                    tier_notes.VOUCH.encode(fingerprint, components))

    def vouched(self, fingerprint: str) -> bool:
        """Whether the remote tier holds a vouch for `fingerprint` signed with our secret."""
        if self.remote is None:
            return False
        fetched = self.remote.fetch(fingerprint, tier_notes.VOUCH_KEY,
                                    functools.partial(tier_notes.VOUCH.decode, fingerprint))
        return fetched is not None

    def _discard_corrupt(self, fingerprint: str, key: str, problem: Exception) -> None:
        warn_once(("corrupt", str(self.root), fingerprint, key), f"numba_cache: ignoring the "
                  f"unreadable cache entry {key[:12]} in {self.root} ({problem}); it will be "
                  "compiled again.")
        self.count(fingerprint, "corrupt")
        if self.readonly:
            return
        with contextlib.suppress(OSError):
            if self._locks.held_here(fingerprint, key):
                self._delete(fingerprint, key)
            else:  # whoever holds the lock is writing the entry anew: the record is theirs
                self._remove_unless_locked(fingerprint, key)

    def _may_write(self) -> bool:
        """Whether writing is allowed; the first refusal in a process is warned."""
        if self.readonly:
            unusable = None if self.settings.readonly else unusable_root(self.root)
            why = ("readonly setting" if self.settings.readonly
                   else f"it is {unusable}" if unusable else "the directory is not writable")
            warn_once(
                ("readonly", str(self.root)),
                f"numba_cache: the cache {self.root} is read-only ({why}): "
                "cached kernels are loaded, nothing is saved or counted.",
            )
        return not self.readonly
