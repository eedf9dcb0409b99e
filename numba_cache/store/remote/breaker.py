"""A circuit breaker: after a failure, leave the server alone for a while.

A server that is down or overloaded costs every lookup a timeout; with hundreds of
kernels per model that would turn a short outage into minutes of waiting. After a
failure the breaker stays open for the back-off period, during which the remote
tier is not tried at all; the first call after it is the probe.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Breaker:
    """Open for `backoff` seconds after each :meth:`trip`; `clock` is monotonic seconds."""

    def __init__(self, backoff: float, clock: Callable[[], float] = time.monotonic):
        self.backoff = backoff
        self._clock = clock
        self._open_until = float("-inf")

    def allows(self) -> bool:
        """Whether the server may be tried now."""
        return self._clock() >= self._open_until

    def trip(self) -> None:
        """Record a failure: the server is not tried for the next `backoff` seconds."""
        self._open_until = self._clock() + self.backoff
