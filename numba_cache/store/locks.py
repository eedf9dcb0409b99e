"""File locks for entries and store-wide maintenance: ``flock`` files through filelock.

filelock is imported on the first lock taken, not with the store: a process that
only loads hits never locks, and the import is a measurable part of its start.
"""

from __future__ import annotations

from pathlib import Path


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
    try:
        lock.acquire(timeout=timeout)
    except Timeout as busy:
        raise LockBusy(str(path)) from busy
    return lock
