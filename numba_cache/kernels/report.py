"""What happened to each kernel lookup: session counters, persistent counters, warnings.

Counter names: ``graph.hit``, ``op.miss``, ``uncacheable:<reason>``, ``corrupt``...
The session counters (this process) are what tests and the demo read; the store
keeps the same counters across processes for ``numba-cache stats``.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter

logger = logging.getLogger("numba_cache")

_session: Counter = Counter()
_warned: set = set()


class UncacheableKernelWarning(UserWarning):
    """A kernel was compiled but will not be persisted (once per op type and reason)."""


def session_stats() -> Counter:
    """Counters of this process (a copy)."""
    return Counter(_session)


def reset_session_stats() -> None:
    _session.clear()


def record(context, name: str) -> None:
    _session[name] += 1
    context.store.count(context.fingerprint.digest, name)


def lookup(context, key, decision: str) -> None:
    """Log one lookup decision (``hit``, ``miss``, ``uncacheable``) at debug level."""
    logger.debug("%s %s %s: %s", key.kind, decision, key.short, key.summary)


def uncacheable(context, key, verdict) -> None:
    """Count an uncacheable kernel; warn once per process per op and reason."""
    record(context, f"uncacheable:{verdict.reason}")
    lookup(context, key, f"uncacheable ({verdict.reason})")
    subject = key.components.get("op_type", key.kind)
    if (subject, verdict.reason) in _warned:
        return
    _warned.add((subject, verdict.reason))
    message = f"numba_cache will not persist the kernel of {key.summary}: {verdict.detail}"
    logger.info(message)
    warnings.warn(message, UncacheableKernelWarning, stacklevel=2)
