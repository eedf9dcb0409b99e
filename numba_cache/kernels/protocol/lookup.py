"""What a kernel cache's lookup is made of: its sources, in order, and the hit one gives.

Each cache class lists where its kernel is looked for, in order
(:meth:`.KernelCache.sources`); the first :class:`Hit` serves. A source reads
this process's own kernels or the store: the store's sources are asked only of
a kernel that is persistent, once numba's runtime is ready for stored code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from numba_cache.kernels.outcomes import report
from numba_cache.kernels.protocol.serialize import load_compile_result
from numba_cache.kernels.runtime import blocks as object_mode_blocks
from numba_cache.store import Entry, entry_layout


@dataclass(frozen=True)
class Source:
    """One place a kernel may be found: ``find(signature, target_context) -> Hit | None``."""

    find: Callable
    reads_store: bool = True


def nothing() -> None:
    """What serving a hit entails when nothing does."""


@dataclass(frozen=True)
class Hit:
    """A compile result a source found."""

    compiled: object
    #: The entry the collision detector compares a new compile with (:mod:`.verification`),
    #: read when it asks (it gives None if that entry is gone); None if this hit is never
    #: verified.
    stored_entry: Callable[[], Entry | None] | None
    #: What serving it, rather than verifying it, entails.
    serve: Callable[[], None] = nothing


def rebuild(context, entry: Entry, sig, target_context):
    """The compile result of `entry` for `sig`, or None; an entry that cannot be loaded
    is removed (reported and counted as corrupt)."""
    payload = entry.blobs.get(entry_layout.overload_blob_name(sig))
    if payload is None:
        return None
    try:
        object_mode_blocks.note_blocks(object_mode_blocks.named_blocks(
            *entry_layout.decode_blocks(entry.blobs.get(entry_layout.BLOCKS_BLOB))))
        return load_compile_result(payload, target_context,
                                   entry.blobs.get(entry_layout.symbols_blob_name(sig)))
    except Exception as exc:  # any failure to rebuild means the entry is unusable
        report.remove_corrupt(context, entry.key, f"entry {entry.key[:12]} ({entry.summary}), "
                              f"its kernel could not be loaded: {exc!r}; recompiling",
                              stacklevel=3)
        return None
