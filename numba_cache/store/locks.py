"""File locks for entries and store-wide maintenance: ``flock`` files through filelock.

filelock is imported on the first lock taken, not with the store: a process that
only loads hits never locks, and the import is a measurable part of its start.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .local import make_private_dirs
from .notices import warn_once

#: errno values of a disk that refuses writes: full, over quota, failing, read-only.
DISK_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)
#: How often a waiting process tries a held lock again, as (for how many seconds of the
#: wait, poll interval). Most waits are for an op kernel that a compile-ahead helper or
#: another process is compiling, tens of milliseconds: filelock's default poll of 50 ms
#: made each such wait last up to 50 ms longer than the compile. Long waits poll slowly.
POLLING = ((1.0, 0.005), (float("inf"), 0.05))


class LockBusy(Exception):
    """Another process holds the lock, and the timeout ran out."""


def acquire(path: Path, timeout: float):
    """The lock at `path`, acquired within `timeout` seconds (a ``filelock.FileLock``).

    Raises :class:`LockBusy` if another process holds it, OSError (or
    NotImplementedError, filelock < 4) if it cannot be created.
    """
    from filelock import FileLock, Timeout

    # filelock >= 4 falls back to a soft lock where the filesystem has no flock. A soft
    # lock outlives a killed holder, and every later compile of the key would wait for
    # the full timeout; going on without a lock is better.
    try:
        lock = FileLock(path, fallback_to_soft=False)
    except TypeError:  # filelock < 4: no fallback to turn off
        lock = FileLock(path)
    started = time.monotonic()
    for phase_seconds, poll_interval in POLLING:
        left = min(timeout, phase_seconds) - (time.monotonic() - started)
        with contextlib.suppress(Timeout):
            lock.acquire(timeout=max(left, 0.0), poll_interval=poll_interval)
            return lock
        if time.monotonic() - started >= timeout:
            break
    raise LockBusy(str(path))


class EntryLocks:
    """The locks of a store's entries and of its eviction, under `root`.

    An entry's lock is an ``flock`` on ``<fingerprint>/locks/<key>.lock``: the kernel
    releases it when its holder exits, even by SIGKILL, so a dead compiler never blocks
    the others. Locks a thread holds are remembered, so that a save or removal inside a
    compile of the same key does not wait for its own lock (a second flock would).
    A lock that cannot be created (read-only store, permissions, full disk) is not
    taken: `on_disk_failure` is told of a disk that refused, anything else is warned once.
    """

    def __init__(self, root: Path, *, enabled: Callable[[], bool], lock_timeout: float,
                 on_disk_failure: Callable[[Exception], None]):
        self.root = root
        self._enabled = enabled
        self._lock_timeout = lock_timeout
        self._on_disk_failure = on_disk_failure
        self._thread = threading.local()

    @contextlib.contextmanager
    def hold(self, fingerprint: str, key: str) -> Iterator[bool]:
        """Hold the entry's lock for the block (see :meth:`Store.lock`); yields whether it is held."""
        held_here = self._held()
        if (fingerprint, key) in held_here:
            yield True
            return
        held = None
        if self._enabled():
            try:
                held = self.acquire(self._path(fingerprint, key), self._lock_timeout)
            except LockBusy:
                warn_once(
                    ("lock timeout", fingerprint, key),
                    f"numba_cache: waited {self._lock_timeout:g} s for another process "
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

    def held_here(self, fingerprint: str, key: str) -> bool:
        """Whether this thread holds the entry's lock."""
        return (fingerprint, key) in self._held()

    @contextlib.contextmanager
    def unless_busy(self, fingerprint: str, key: str, *, without_lock: bool) -> Iterator[bool]:
        """The entry's lock for the block if nobody else holds it: yields False (not waiting)
        when another process holds it, True when this thread held it already or got it,
        and `without_lock` when the lock cannot be created.
        """
        if self.held_here(fingerprint, key):
            yield True
            return
        try:
            lock = self.acquire(self._path(fingerprint, key), 0)
        except LockBusy:
            yield False
            return
        try:
            yield lock is not None or without_lock
        finally:
            if lock is not None:
                lock.release()

    def acquire(self, path: Path, timeout: float):
        """The lock at `path`, within `timeout` seconds; LockBusy if someone holds it,
        None (reported) if it cannot be created."""
        try:
            make_private_dirs(self.root)
            path.parent.mkdir(parents=True, exist_ok=True)
            return acquire(path, timeout)
        # NotImplementedError is how filelock < 4 says the filesystem has no flock.
        except (OSError, NotImplementedError) as error:
            if getattr(error, "errno", None) in DISK_FAILURES:
                self._on_disk_failure(error)
            else:
                warn_once(
                    ("lock", str(self.root)),
                    f"numba_cache: cannot create the lock {path} ({error}); "
                    "going on without locking.",
                )
            return None

    def _held(self) -> set[tuple[str, str]]:
        held = getattr(self._thread, "held", None)
        if held is None:
            held = self._thread.held = set()
        return held

    def _path(self, fingerprint: str, key: str) -> Path:
        return self.root / fingerprint / "locks" / f"{key}.lock"
