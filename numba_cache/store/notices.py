"""Warnings of the store, each given at most once per process and topic.

A cache that cannot do its job must say so, but a compile loop that hits the same
problem a thousand times must not print it a thousand times.
"""

from __future__ import annotations

from collections.abc import Hashable

from numba_cache import session
from numba_cache.logs import warn


class StoreWarning(UserWarning):
    """The store could not read, write or trust something; compilation goes on without it."""


def warn_once(topic: Hashable, message: str) -> None:
    """Warn with `message` unless a warning on `topic` was already given in this process."""
    given = session.current().warnings_given
    if topic in given:
        return
    given.add(topic)
    warn(message, StoreWarning, stacklevel=3)


def warn_cannot_write(root, error: Exception) -> None:
    """The one warning a process gets when the store's disk refuses writes, whichever
    write (record, index, lock, generated source) meets it first."""
    warn_once(("write", str(root)), f"numba_cache: cannot write to the cache {root} ({error}); "
              "compiled kernels are not being saved.")


def warn_cannot_delete(root, error: OSError) -> None:
    warn_once(("delete", str(root)), f"numba_cache: cannot delete in {root}: {error}")
