"""What happened to each kernel lookup: counters, the log, observers.

Counter names: ``graph.hit``, ``op.miss``, ``uncacheable:<reason>``, ``corrupt``...
The session counters (this process) are what tests and the demo read; the store
keeps the same counters across processes for ``numba-cache stats``. Each lookup
is also logged at debug level (see :mod:`numba_cache.logs`) and handed to the
observers registered with :func:`observe_lookups` (``numba-cache explain``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from numba_cache import session
from numba_cache.keys.components import summarize
from numba_cache.logs import logger, warn
from numba_cache.store.notices import StoreWarning

if TYPE_CHECKING:
    from numba_cache.keys import Fingerprint
    from numba_cache.keys.key import Key

class Lookup(NamedTuple):
    """One lookup of a kernel key: `decision` is ``hit``, ``miss`` or ``uncacheable (<reason>)``."""

    key: Key
    decision: str
    fingerprint: Fingerprint



def session_stats() -> Counter:
    """Counters of this process (a copy)."""
    return Counter(session.current().counters)


def reset_session_stats() -> None:
    session.current().counters.clear()


def record(context, name: str, n: int = 1) -> None:
    """Count `name` in this process, and in the store unless this process is a helper
    (the process it helps counts its work: :meth:`.Session.become_helper`)."""
    state = session.current()
    state.counters[name] += n
    if state.counts_in_store:
        context.store.count(context.fingerprint.digest, name, n)


def remove_corrupt(context, key_digest: str, what: str, stacklevel: int) -> None:
    """Warn that the entry of `key_digest` is removed (`what`: which entry, why, and what now),
    count it as ``corrupt`` and remove it: a corrupt entry is a miss, once."""
    warn(f"numba_cache: removing {what}", StoreWarning, stacklevel=stacklevel + 1)
    record(context, "corrupt")
    context.store.remove(context.fingerprint.digest, key_digest)


def record_reuse(kind: str) -> None:
    """A kernel this process already had served another node (``op.reused``; session only)."""
    session.current().counters[f"{kind}.reused"] += 1


def lookup(context, key, decision: str) -> None:
    """Report one lookup decision (``hit``, ``miss``, ``uncacheable (<reason>)``).

    It goes to the observers, and to the debug log with the key's components.
    """
    observers = session.current().lookup_observers
    if observers:
        observed = Lookup(key, decision, context.fingerprint)
        for observer in observers:
            observer(observed)
    # Summarising the components is not free: only when debug records are shown.
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "%s %s %s: %s [%s]", key.kind, decision, key.short, key.summary,
            summarize(key.components),
        )


@contextlib.contextmanager
def observe_lookups(callback: Callable[[Lookup], None] | None = None) -> Iterator[list[Lookup]]:
    """Collect the lookups this process makes during the block, in order.

    `callback`, when given, is also called with each lookup as it happens.
    """
    observed: list[Lookup] = []

    def observe(lookup: Lookup) -> None:
        observed.append(lookup)
        if callback is not None:
            callback(lookup)

    observers = session.current().lookup_observers
    observers.append(observe)
    try:
        yield observed
    finally:
        observers.remove(observe)


def uncacheable(context, key, verdict) -> None:
    """Count an uncacheable kernel; log it once per process per op and reason.

    Logged (``NBCACHE_LOG=info``), counted (``numba-cache stats``) and kept as a
    marker (``list``, ``explain``), not warned: a compile through numba_cache
    tells the user what PyTensor's ``NUMBA`` tells, no more (a test suite run
    with ``-W error`` passes or fails as it does with ``NUMBA``).
    """
    record(context, f"uncacheable:{verdict.reason}")
    lookup(context, key, f"uncacheable ({verdict.reason})")
    subject = key.components.get("op_type", key.kind)
    logged = session.current().logged_uncacheable
    if (subject, verdict.reason) in logged:
        return
    logged.add((subject, verdict.reason))
    logger.info("numba_cache will not persist the kernel of %s: %s", key.summary, verdict.detail)


def unmet_links(context, key, why: str) -> None:
    """A stored graph kernel not loaded because an op kernel it calls is not (``links:unmet``)."""
    record(context, "links:unmet")
    logger.info("numba_cache compiles %s again: %s", key.summary, why)
