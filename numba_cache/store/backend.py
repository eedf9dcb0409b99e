"""The interface every storage backend offers the :class:`~numba_cache.store.Store`.

A backend moves opaque record bytes; it does not decode them, count, evict or
lock. The local directory is the first backend; remote ones will implement the
same four methods.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol


class Backend(Protocol):
    def get(self, fingerprint: str, key: str) -> bytes | None:
        """The whole record of the entry, or None if there is none.

        Raises OSError if the entry exists but cannot be read.
        """

    def put(self, fingerprint: str, key: str, record: bytes, source: str | None) -> None:
        """Store `record`, and `source` as a human-readable copy when given.

        Atomic: a reader sees the previous record or the new one, never a part.
        Raises OSError when it cannot write the record; the copy is best effort.
        """

    def remove(self, fingerprint: str, key: str) -> None:
        """Delete the entry; deleting a missing entry is not an error."""

    def list(self, fingerprint: str | None = None) -> Iterator[tuple[str, str, int, float]]:
        """Yield ``(fingerprint, key, size, mtime)`` of every entry (of one fingerprint).

        ``size`` is the bytes the entry occupies, ``mtime`` when it was written.
        """
