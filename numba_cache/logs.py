"""The ``numba_cache`` logger, and its level setting.

``NBCACHE_LOG=debug|info|warning``, read when numba_cache is imported, or
:func:`set_level` (``numba-cache --verbose`` on the command line) print the
logger's records of that level and above on stderr. At ``debug`` every kernel
lookup is logged with its key components, summarised, and its decision (hit,
miss, uncacheable); at ``info``, kernels that will not be persisted, and why.
Applications that configure :mod:`logging` themselves can leave NBCACHE_LOG
unset and set the level of the ``numba_cache`` logger instead.
"""

from __future__ import annotations

import logging
import os
import warnings

from numba_cache import session

logger = logging.getLogger("numba_cache")

#: The environment variable holding the level name.
ENVIRONMENT = "NBCACHE_LOG"
#: Level names accepted by NBCACHE_LOG and :func:`set_level`.
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def warn(message: str, category: type[Warning] = UserWarning, stacklevel: int = 1) -> None:
    """Warn as :func:`warnings.warn`, except where a filter makes the warning an error
    (``-W error``, pytest's ``filterwarnings = error``): it is logged instead. What goes
    wrong with the cache never fails the compile or the start-up that meets it."""
    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    except category:
        logger.warning("%s", message)


def set_level(name: str) -> None:
    """Print numba_cache's log records of level `name` and above on stderr.

    Raises ValueError for a name not in :data:`LEVELS`.
    """
    level = LEVELS.get(name.strip().lower())
    if level is None:
        raise ValueError(f"unknown log level {name!r}; use one of {', '.join(LEVELS)}")
    state = session.current()
    if state.stderr_handler is None:
        state.stderr_handler = logging.StreamHandler()
        state.stderr_handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        logger.addHandler(state.stderr_handler)
        # Printed here once; the root logger's handlers would print it a second time.
        logger.propagate = False
    logger.setLevel(level)


def _apply_environment() -> None:
    name = os.environ.get(ENVIRONMENT, "").strip()
    if not name:
        return
    try:
        set_level(name)
    except ValueError as error:
        logger.warning("numba_cache: %s ignored: %s", ENVIRONMENT, error)


_apply_environment()
