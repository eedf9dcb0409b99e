"""What a remote backend raises when the server fails: an error or a timeout (ccache's ``Failure``).

A backend turns its client's exceptions into these, so that the tier tells a
server that failed (``remote:error``) or did not answer in time
(``remote:timeout``) from a bug in numba_cache (``remote:bug``), which it reports
as one.
"""

from __future__ import annotations


class RemoteFailure(Exception):
    """The server failed: refused, dropped the connection, answered with an error."""

    counter = "remote:error"


class RemoteTimeout(RemoteFailure):
    """The server did not answer within the timeout."""

    counter = "remote:timeout"
