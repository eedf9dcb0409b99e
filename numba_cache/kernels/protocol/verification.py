"""The collision detector's hold on a kernel cache's lookup (:mod:`.collisions`).

Under the ``verify_hits`` setting, a sampled hit is not served: numba compiles
the kernel again, and the cache, handed that compile, compares its code with the
entry the hit came from (:meth:`HitVerification.pending`).
"""

from __future__ import annotations

from numba_cache.kernels.outcomes import collisions
from numba_cache.kernels.protocol.lookup import Hit
from numba_cache.store import Entry


class HitVerification:
    """The hits of one kernel cache that are verified rather than served."""

    def __init__(self, settings):
        self._settings = settings
        #: The entries of hits being verified, by numba signature.
        self._pending: dict = {}

    def takes(self, hit: Hit, signature) -> bool:
        """Whether `hit` is verified: numba then compiles the kernel for `signature`."""
        if hit.stored_entry is None or not collisions.sampled(self._settings):
            return False
        entry = hit.stored_entry()
        if entry is None:
            return False
        self._pending[signature] = entry
        return True

    def pending(self, signature) -> Entry | None:
        """The entry a compile for `signature` is to be compared with, if it verifies a hit
        (asked once)."""
        return self._pending.pop(signature, None)

