"""Which entries an eviction removes: least recently used first, until the rest fit."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .entry import Entry

#: A full store is evicted down to this fraction of its maximum size, so that
#: the following saves do not each pay for an eviction pass.
EVICTION_TARGET = 0.9


def evict(
    listing: Iterable[Entry],
    total: int,
    max_bytes: int | None,
    last_used_before: float | None,
    remove: Callable[[Entry], bool],
) -> list[Entry]:
    """Offer `remove` the entries of `listing` (least recently used first, `total` bytes
    in all) that must go, reading no further than it must.

    Those last used before `last_used_before` go, then more until the rest fit in
    `max_bytes`. An entry `remove` refuses (True means removed) still counts toward
    the size. Returns the removed entries.
    """
    removed = []
    for entry in listing:
        unused = last_used_before is not None and entry.last_used < last_used_before
        if not unused and (max_bytes is None or total <= max_bytes):
            break  # the listing is in LRU order: every later entry stays too
        if remove(entry):
            total -= entry.size
            removed.append(entry)
    return removed
