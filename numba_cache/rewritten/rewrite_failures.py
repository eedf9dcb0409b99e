"""Whether a rewrite failed while PyTensor rewrote a graph, which then is not stored.

PyTensor's rewriters catch what a rewrite raises, log it (at ERROR) and go on without
that rewrite (``on_opt_error="warn"``, the default). What made it raise may belong to
this process alone: a warning its filters turn into an error (``python -W error``,
pytest's ``filterwarnings = error``; fusion stopping at the kernel argument limit
warns), memory running out. The graph rewritten then is not the one a process gets
where the rewrite succeeds, and the rewrite key does not hold the cause: storing it
would serve it there. So a rewrite during which one failed is not stored, as ccache
does not store a failed compile (counted ``uncacheable:rewrite-failed``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from numba_cache._compat.pytensor_internals import REWRITE_FAILURE_LOGGER

#: The reason counted (``uncacheable:<reason>``) for a rewrite not stored because one failed.
REWRITE_FAILED = "rewrite-failed"


class _Failures(logging.Filter):
    """Notes the first ERROR record of the logger, and lets every record through: a filter,
    not a handler, so that where the logger has no handler Python's last resort still
    prints it, as without numba_cache."""

    def __init__(self):
        super().__init__()
        self.first: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if self.first is None and record.levelno >= logging.ERROR:
            self.first = record.getMessage()[:200]
        return True


@contextlib.contextmanager
def watched() -> Iterator[_Failures]:
    """The failures PyTensor's rewriters report inside: ``.first`` is the first message,
    None if none failed."""
    failures = _Failures()
    logger = logging.getLogger(REWRITE_FAILURE_LOGGER)
    logger.addFilter(failures)
    try:
        yield failures
    finally:
        logger.removeFilter(failures)
