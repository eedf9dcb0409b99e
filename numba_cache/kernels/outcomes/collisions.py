"""The collision detector: hits recompiled and compared with what the store served.

A key that misses something the code depends on (issue 20: CSR and CSC sparse
kernels shared one) serves one program's code to another, silently. With
``NBCACHE_VERIFY_HITS`` (a fraction of hits, ``1`` for all) a sampled hit is
compiled again and the digest of its LLVM IR compared with the digest stored
with the served code; a mismatch removes the entry, warns naming the key looked
up and the key the served code was compiled under, and counts ``collision``
(``numba-cache stats``). ``NBCACHE_VERIFY_LIMIT`` caps the hits verified per
process (``numba-cache verify --recompile N`` uses it). Off, the hit path pays
one attribute check.

The code is compared by two digests, of the final IR and of the module before
numba's module passes (:mod:`numba_cache.kernels.protocol.ir_digest`, which says
what they leave out and why two); served code is another program's only where both
differ. Entries recorded with the final digest alone are compared by it.
"""

from __future__ import annotations

import random
from typing import NamedTuple

from numba_cache import logs, session
from numba_cache.kernels.outcomes import report
from numba_cache.kernels.protocol.ir_digest import CodeDigests
from numba_cache.keys.key import Key
from numba_cache.store import StoreWarning, entry_layout


class Collision(NamedTuple):
    """A hit whose served code differs from what its key compiles to now."""

    key: Key  # the key looked up
    made_under: Key  # the key the served code was stored under (may be `key` itself)


def found() -> list[Collision]:
    """The collisions found in this process, in order."""
    return list(session.current().collisions)


def sampled(settings) -> bool:
    """Whether to verify a hit, given `settings` with ``verify_hits`` on (not 0)."""
    state = session.current()
    limit = settings.verify_hits_limit
    if limit and state.hits_sampled >= limit:
        return False
    rate = settings.verify_hits
    if rate >= 1.0 or random.random() < rate:
        state.hits_sampled += 1
        return True
    return False


def served_code_matches(context, key, served, signature, digests: CodeDigests) -> bool:
    """Whether the entry `served` under `key` holds the code compiled now, whose
    digests are `digests`.

    On a mismatch the entry is removed, counted as ``collision`` and warned about.
    """
    recorded = entry_layout.decode_code_digests(served.blobs, signature)
    if recorded is None:  # written by a numba_cache that recorded no IR: nothing to compare
        report.record(context, "verify.unrecorded")
        return True
    if digests.same_code(CodeDigests(*recorded)):
        report.record(context, "verify.same")
        return True
    made_under = Key.from_components(served.kind, served.summary, served.components)
    if made_under.digest == key.digest:
        origin = "made under the same key: the key misses something the code depends on"
    else:
        origin = f"made under key {made_under.short} ({made_under.summary})"
    logs.warn(
        f"numba_cache: key collision: entry {key.short} ({key.summary}) served code that differs "
        f"from what it compiles to now ({origin}); entry removed, compiled code used",
        StoreWarning,
        stacklevel=2,
    )
    report.record(context, "collision")
    session.current().collisions.append(Collision(key, made_under))
    context.store.remove(context.fingerprint.digest, key.digest)
    return False
