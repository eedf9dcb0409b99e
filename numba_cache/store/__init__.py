"""The on-disk store of compiled kernels.

:class:`Store` is the API; entries are :class:`Entry` objects, saved as records
(:mod:`.record`) by a backend (:mod:`.backend`, :mod:`.local`) and indexed in
SQLite (:mod:`.index`) for listings, LRU eviction and counters.
"""

from .entry import KINDS, Entry
from .notices import StoreWarning
from .record import CorruptEntry
from .store import Store
from .verify import Problem

__all__ = ["KINDS", "CorruptEntry", "Entry", "Problem", "Store", "StoreWarning"]
