"""The SQLite index of a store: listings, LRU order and counters as queries.

The entry files are the truth; the index mirrors their metadata and adds what a
file cannot hold cheaply: last use, hits and counters. Counter bumps are UPSERTs,
so concurrent processes add up instead of overwriting each other.

Every SQLite error is caught here. A corrupt index file is moved aside and
rebuilt from the entry files; a write that fails because the disk is full or
failing is handed to the store, whose other writes fail alike and which warns
once for all; any other error (locked for longer than the busy timeout,
read-only file, unknown schema) gives one warning per process. The operation
then returns its empty answer, so the store carries on without the index; after
a lock held past the busy timeout, the index is not asked again for a while.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple, TypeVar

from .. import session, versions
from .entry import Entry
from .local import make_private_dirs
from .notices import warn_once

BUSY_TIMEOUT = 5.0
#: After waiting out the busy timeout once, the index is left alone for this long: a
#: process holding it (a stopped writer, a long maintenance) would cost every load 5 s.
LOCKED_BACKOFF = 60.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS entries(
        fingerprint TEXT NOT NULL,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        summary TEXT NOT NULL,
        size INTEGER NOT NULL,
        created REAL NOT NULL,
        last_used REAL NOT NULL,
        hits INTEGER NOT NULL,
        cacheable INTEGER NOT NULL,
        reason TEXT,
        PRIMARY KEY(fingerprint, key)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS entries_by_last_used ON entries(last_used)",
    """CREATE TABLE IF NOT EXISTS counters(
        fingerprint TEXT NOT NULL,
        name TEXT NOT NULL,
        value INTEGER NOT NULL,
        PRIMARY KEY(fingerprint, name)
    ) WITHOUT ROWID""",
)

_COLUMNS = "fingerprint, key, kind, summary, size, created, last_used, hits, cacheable, reason"
_VALUES = f"({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_BUMP = (
    "INSERT INTO counters(fingerprint, name, value) VALUES (?, ?, ?) "
    "ON CONFLICT(fingerprint, name) DO UPDATE SET value = value + excluded.value"
)

#: The bytes of all entries, kept by triggers as rows come and go, so that a save does
#: not sum the whole table to learn whether the store outgrew its maximum size.
_TOTALS = (
    "CREATE TABLE IF NOT EXISTS totals(id INTEGER PRIMARY KEY CHECK (id = 0), bytes INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO totals(id, bytes) SELECT 0, COALESCE(SUM(size), 0) FROM entries",
    """CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries
        BEGIN UPDATE totals SET bytes = bytes + new.size WHERE id = 0; END""",
    """CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries
        BEGIN UPDATE totals SET bytes = bytes - old.size WHERE id = 0; END""",
    """CREATE TRIGGER IF NOT EXISTS entries_resized AFTER UPDATE OF size ON entries
        BEGIN UPDATE totals SET bytes = bytes - old.size + new.size WHERE id = 0; END""",
)
_TOTAL_SIZE = "SELECT bytes FROM totals WHERE id = 0"
#: Schema 1 lacks only the totals: it is brought up to date in place, or read as it is.
_UPGRADABLE = 1
# An UPDATE, not INSERT OR REPLACE: a replacing delete fires no delete trigger.
_REPLACE = (f"INSERT INTO entries{_VALUES} ON CONFLICT(fingerprint, key) DO UPDATE SET "
            + ", ".join(f"{column} = excluded.{column}" for column in _COLUMNS.split(", ")[2:]))
_RECORD_HIT = ("UPDATE entries SET last_used = ?, hits = hits + 1 "
               "WHERE fingerprint = ? AND key = ?")
_ADD_FOUND = f"INSERT OR IGNORE INTO entries{_VALUES}"

#: SQLite's primary result codes for a write the disk refused: full, failing, or
#: no file could be created.
_DISK_FAILURES = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN)

_Result = TypeVar("_Result")


class _Bookkeeping(NamedTuple):
    """Uses of entries (their index rows) and counter bumps, to be written together."""

    hits: list[tuple]
    counts: dict[tuple[str, str], int]


class Index:
    """The index file at `path`.

    `scan` yields the entries found on disk (with ``size`` and ``last_used``); it
    fills a new or rebuilt index. `on_disk_failure` is told of writes the disk
    refused. With `readonly` the file is opened read-only, and writing methods do
    nothing. ``exists(fingerprint, key)`` tells whether an entry's record is on disk.
    """

    def __init__(
        self,
        path: Path,
        *,
        readonly: bool,
        scan: Callable[[], Iterable[Entry]],
        exists: Callable[[str, str], bool],
        on_disk_failure: Callable[[Exception], None],
    ):
        self.path = path
        self._readonly = readonly
        self._scan = scan
        self._exists = exists
        self._on_disk_failure = on_disk_failure
        # One connection per thread, and a new one after a fork: a connection must
        # not be shared across threads' transactions nor carried into a child.
        self._local = threading.local()
        self._unavailable = False
        self._recovered = False
        self._locked_until = 0.0

    def record_hit(self, entry: Entry, size: int, now: float) -> None:
        """Note a use of `entry`: its last use and hits + 1 (callers count the hit).

        An entry missing from the index (its file was found without a row) is added,
        if its record is still on disk when the use is written. Within
        :meth:`bookkeeping_together`, the use is written at the block's end.
        """
        row = _row(entry, size, last_used=now, hits=1)
        pending = getattr(self._local, "pending", None)
        if pending is not None:
            pending.hits.append(row)
            return
        self._write_bookkeeping(_Bookkeeping([row], {}))

    def count(self, fingerprint: str, name: str, n: int) -> None:
        """Add `n` to a counter; within :meth:`bookkeeping_together`, at the block's end."""
        pending = getattr(self._local, "pending", None)
        if pending is not None:
            pending.counts[fingerprint, name] = pending.counts.get((fingerprint, name), 0) + n
            return
        self._write_bookkeeping(_Bookkeeping([], {(fingerprint, name): n}))

    @contextlib.contextmanager
    def bookkeeping_together(self) -> Iterator[None]:
        """The uses and counts this thread notes in the block, written in one transaction
        at its end.

        A warm compile loads and counts each kernel it calls; a transaction for each
        cost as much as the loads themselves. What a process dying in the block noted
        is lost: only least-recently-used order, hit counts and counters, which the
        entries don't need. Nested blocks write at the outermost one's end.
        """
        if getattr(self._local, "pending", None) is not None:
            yield
            return
        self._local.pending = _Bookkeeping([], {})
        try:
            yield
        finally:
            pending, self._local.pending = self._local.pending, None
            if pending.hits or pending.counts:
                self._write_bookkeeping(pending)

    def _write_bookkeeping(self, pending: _Bookkeeping) -> None:
        def work(connection: sqlite3.Connection) -> None:
            for row in pending.hits:
                fingerprint, key, last_used = row[0], row[1], row[6]
                if connection.execute(_RECORD_HIT, (last_used, fingerprint, key)).rowcount:
                    continue
                # No row: a file found without one, or an entry evicted since its use
                # (its record is deleted before its row, and that row's deletion waits
                # for this transaction): only the first gets a row.
                if self._exists(fingerprint, key):
                    connection.execute(_ADD_FOUND, row)
            connection.executemany(_BUMP, [(fingerprint, name, n) for (fingerprint, name), n
                                           in pending.counts.items()])

        self._run(work, None, write=True, create=True)

    def insert(self, entry: Entry, size: int, now: float) -> None:
        """Add `entry`, or replace its row (a re-save starts its history anew)."""
        row = _row(entry, size, last_used=now, hits=0)
        self._run(
            lambda connection: connection.execute(_REPLACE, row),
            None,
            write=True,
            create=True,
        )

    def drop(self, addresses: Iterable[tuple[str, str]]) -> None:
        """Delete the rows of these ``(fingerprint, key)`` pairs."""
        addresses = list(addresses)
        self._run(
            lambda connection: connection.executemany(
                "DELETE FROM entries WHERE fingerprint = ? AND key = ?", addresses
            ),
            None,
            write=True,
        )

    def has(self, fingerprint: str, key: str) -> bool:
        """Whether the entry has a row (False when there is no usable index)."""
        query = "SELECT 1 FROM entries WHERE fingerprint = ? AND key = ?"
        return self._run(
            lambda connection: connection.execute(query, (fingerprint, key)).fetchone() is not None,
            False,
        )

    def clear(self, fingerprint: str | None = None) -> None:
        """Delete every row (of one fingerprint); counters stay."""
        where, parameters = _filter(fingerprint=fingerprint)
        self._run(
            lambda connection: connection.execute(f"DELETE FROM entries{where}", parameters),
            None,
            write=True,
        )

    def zero_counters(self) -> None:
        self._run(lambda connection: connection.execute("DELETE FROM counters"), None, write=True)

    def rows(self, fingerprint: str | None = None, kind: str | None = None) -> list[Entry] | None:
        """The indexed entries, least recently used first.

        None when there is no usable index (not created yet, or failing): then only
        the files can tell.
        """
        where, parameters = _filter(fingerprint=fingerprint, kind=kind)
        query = f"SELECT {_COLUMNS} FROM entries{where} ORDER BY last_used, key"

        def work(connection: sqlite3.Connection) -> list[Entry]:
            return [_entry(row) for row in connection.execute(query, parameters)]

        return self._run(work, None)

    def total_size(self) -> int | None:
        """The bytes of all indexed entries; None when there is no usable index, or it is
        a read-only index of schema 1, which keeps no total."""
        def work(connection: sqlite3.Connection) -> int | None:
            if _schema_version(connection) == _UPGRADABLE:
                return None
            return connection.execute(_TOTAL_SIZE).fetchone()[0]

        return self._run(work, None)

    def counters(self, fingerprint: str | None = None) -> dict[str, dict[str, int]]:
        """Counter values by fingerprint, then name; empty when there is no usable index."""
        where, parameters = _filter(fingerprint=fingerprint)

        def work(connection: sqlite3.Connection) -> dict[str, dict[str, int]]:
            values: dict[str, dict[str, int]] = {}
            query = f"SELECT fingerprint, name, value FROM counters{where} ORDER BY 1, 2"
            for fingerprint_, name, value in connection.execute(query, parameters):
                values.setdefault(fingerprint_, {})[name] = value
            return values

        return self._run(work, {})

    def _run(
        self,
        work: Callable[[sqlite3.Connection], _Result],
        default: _Result,
        *,
        write: bool = False,
        create: bool = False,
    ) -> _Result:
        """`work` on the connection, in a write transaction if `write`; `default` on failure.

        Without `create`, a missing index file is not created: then there is nothing to
        read or delete, and reading a store must not create one.
        """
        if (write and self._readonly) or time.monotonic() < self._locked_until:
            return default
        try:
            connection = self._connection(create)
            if connection is None:
                return default
            if not write:
                return work(connection)
            with _write_transaction(connection):
                return work(connection)
        except sqlite3.Error as error:
            self._handle(error, write)
        except OSError as error:  # creating the directory, or scanning it to fill the index
            self._unavailable = True
            self._warn(str(error))
        return default

    def _connection(self, create: bool) -> sqlite3.Connection | None:
        held = getattr(self._local, "held", None)
        if held is not None:
            if held[0] != os.getpid():
                # Inherited from the parent: closing it here could checkpoint or unlock the
                # parent's database, so it is kept, unused, until this process exits.
                session.current().inherited_connections.append(held[1])
                self._local.held = None
            elif _file_identity(self.path) == held[2]:
                return held[1]
            else:  # the store was removed (`rm -rf`) and perhaps made again meanwhile
                self._forget_connection()
        if self._unavailable or not (create or self.path.exists()):
            return None
        try:
            connection = self._open()
        except sqlite3.Error:
            # An index that cannot even be opened stays off for this process,
            # rather than costing a failed open on every load.
            self._unavailable = True
            raise
        self._local.held = (os.getpid(), connection, _file_identity(self.path))
        return connection

    def _open(self) -> sqlite3.Connection:
        if self._readonly:
            connection = self._connect_readonly()
        else:
            make_private_dirs(self.path.parent)
            connection = _connect(str(self.path), uri=False)
        try:
            if not self._readonly:
                _use_wal(connection)
                # The index can be rebuilt from the files, so it need not survive a power cut.
                connection.execute("PRAGMA synchronous = NORMAL")
            version = _schema_version(connection)
            if version == 0 and not self._readonly:
                self._initialize(connection)
            elif version == _UPGRADABLE and not self._readonly:
                self._upgrade(connection)
            elif version not in (versions.INDEX_SCHEMA, _UPGRADABLE):
                raise sqlite3.OperationalError(
                    f"schema version {version}, this numba_cache knows {versions.INDEX_SCHEMA}"
                )
        except BaseException:
            connection.close()
            raise
        return connection

    def _connect_readonly(self) -> sqlite3.Connection:
        uri = self.path.as_uri()
        connection = _connect(f"{uri}?mode=ro", uri=True)
        try:
            _schema_version(connection)
            return connection
        except sqlite3.OperationalError:
            connection.close()
        # The WAL's shared-memory file is missing and cannot be created here (read-only
        # directory or mount), so no process has the index open: read the file as it is.
        return _connect(f"{uri}?immutable=1", uri=True)

    def _initialize(self, connection: sqlite3.Connection) -> None:
        """Create the tables of a new (or moved-aside) index and fill them from the disk."""
        # The scan reads every record, so it runs before taking the write lock.
        found = [
            _row(entry, entry.size, last_used=entry.last_used, hits=0)
            for entry in self._scan()
        ]

        def create(connection: sqlite3.Connection) -> None:
            for statement in _SCHEMA:
                connection.execute(statement)
            connection.executemany(f"INSERT OR IGNORE INTO entries{_VALUES}", found)
            _add_totals(connection)

        _change_schema(connection, 0, create)

    def _upgrade(self, connection: sqlite3.Connection) -> None:
        """Add the totals to an index of schema 1, keeping its rows and counters."""
        _change_schema(connection, _UPGRADABLE, _add_totals)

    def _handle(self, error: sqlite3.Error, write: bool) -> None:
        primary_code = getattr(error, "sqlite_errorcode", 0) & 0xFF
        if write and primary_code in _DISK_FAILURES:
            self._on_disk_failure(error)
            return
        if primary_code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            self._locked_until = time.monotonic() + LOCKED_BACKOFF
        corrupt = primary_code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
        if not corrupt or self._readonly or self._recovered:
            self._warn(str(error))
            return
        self._recovered = True
        self._warn(f"it is corrupt ({error}), so it is moved aside and rebuilt from the entries")
        self._forget_connection()
        aside = f"{self.path}.corrupt-{int(time.time())}-{os.getpid()}"
        try:
            # The -wal and -shm files belong to the corrupt database and must not
            # be replayed into the new one.
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.rename(f"{self.path}{suffix}", f"{aside}{suffix}")
        except OSError:
            self._unavailable = True
            return
        self._unavailable = False

    def _forget_connection(self) -> None:
        held = getattr(self._local, "held", None)
        self._local.held = None
        if held is not None:
            with contextlib.suppress(sqlite3.Error):
                held[1].close()

    def _warn(self, problem: str) -> None:
        warn_once(
            ("index", str(self.path)),
            f"numba_cache: the cache index {self.path} is not usable: {problem}. "
            "Entries are still loaded and saved; listings and statistics may be incomplete.",
        )


def _file_identity(path: Path) -> tuple[int, int] | None:
    """Which file `path` names now; None when there is none."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _connect(database: str, *, uri: bool) -> sqlite3.Connection:
    # isolation_level=None: transactions are begun explicitly, as BEGIN IMMEDIATE, so
    # that a writer waits for the write lock up front instead of failing to upgrade.
    return sqlite3.connect(database, timeout=BUSY_TIMEOUT, isolation_level=None, uri=uri)


def _use_wal(connection: sqlite3.Connection) -> None:
    """Put the index in WAL mode. SQLite answers "database is locked" at once, without its
    busy handler, while another process creates a new index: wait as the handler would."""
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            busy = getattr(error, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _change_schema(connection: sqlite3.Connection, expected: int,
                   change: Callable[[sqlite3.Connection], None]) -> None:
    """`change` the schema from version `expected` to the current one, in one write
    transaction; nothing if another process changed it meanwhile."""
    with _write_transaction(connection):
        if _schema_version(connection) == expected:
            change(connection)
            connection.execute(f"PRAGMA user_version = {versions.INDEX_SCHEMA}")


@contextlib.contextmanager
def _write_transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """The block in one write transaction: committed if it ends, rolled back if it raises."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
        raise


def _add_totals(connection: sqlite3.Connection) -> None:
    for statement in _TOTALS:
        connection.execute(statement)


def _schema_version(connection: sqlite3.Connection) -> int:
    return connection.execute("PRAGMA user_version").fetchone()[0]


def _row(entry: Entry, size: int, *, last_used: float, hits: int) -> tuple:
    return (
        entry.fingerprint,
        entry.key,
        entry.kind,
        entry.summary,
        size,
        entry.created,
        last_used,
        hits,
        entry.cacheable,
        entry.reason,
    )


def _entry(row: tuple) -> Entry:
    fingerprint, key, kind, summary, size, created, last_used, hits, cacheable, reason = row
    return Entry(
        fingerprint=fingerprint,
        key=key,
        kind=kind,
        summary=summary,
        size=size,
        created=created,
        last_used=last_used,
        hits=hits,
        cacheable=bool(cacheable),
        reason=reason,
    )


def _filter(**conditions: str | None) -> tuple[str, tuple]:
    """A WHERE clause (or nothing) and its parameters for the conditions that are set."""
    names = [name for name, value in conditions.items() if value is not None]
    where = " WHERE " + " AND ".join(f"{name} = ?" for name in names) if names else ""
    return where, tuple(conditions[name] for name in names)
