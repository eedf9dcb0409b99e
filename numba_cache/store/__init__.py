"""The on-disk store of compiled kernels.

:class:`Store` is the API (a :class:`NullStore` stands in when the cache is
disabled); entries are :class:`Entry` objects, saved as records
(:mod:`.record`) by a backend (:mod:`.backend`, :mod:`.local`) and indexed in
SQLite (:mod:`.index`) for listings, LRU eviction and counters. What an entry holds,
blob by blob, and how each blob is encoded, is :mod:`.entry_layout`'s alone.
"""

from .entry import KINDS, Entry
from .notices import StoreWarning
from .null import NullStore
from .record import CorruptEntry
from .store import Store
from .verify import Problem

__all__ = ["KINDS", "CorruptEntry", "Entry", "NullStore", "Problem", "Store", "StoreWarning"]
