"""What a remote backend raises when the server fails: an error or a timeout (ccache's ``Failure``).

A backend turns its client's exceptions into these, so that the tier tells a
server that failed (``remote:error``) or did not answer in time
(``remote:timeout``) from a bug in numba_cache (``remote:bug``), which it reports
as one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager


class RemoteFailure(Exception):
    """The server failed: refused, dropped the connection, answered with an error."""

    counter = "remote:error"


class RemoteTimeout(RemoteFailure):
    """The server did not answer within the timeout."""

    counter = "remote:timeout"


def typed_failures(failures: Callable[[], AbstractContextManager]):
    """A decorator running a backend's method inside `failures`, the backend's context
    manager turning its client's exceptions into these."""
    def decorate(method):
        @functools.wraps(method)
        def call(*args, **kwargs):
            with failures():
                return method(*args, **kwargs)
        return call
    return decorate
