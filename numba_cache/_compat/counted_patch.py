"""A global patch of upstream's, in place while at least one block needs it.

numba_cache's global patches (:mod:`.tensor_constant_data`, :mod:`.destroy_handler_cycles`,
:mod:`.sparse_import`) are installed when the first block that needs one begins and
removed when the last one ends: blocks nest and may run in several threads, and outside
them upstream runs exactly as without numba_cache.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class CountedPatch:
    """One global patch and the blocks using it; `saved` is what :meth:`applied`'s
    `install` returned (upstream's original), while the patch is in place."""

    def __init__(self):
        self._lock = threading.Lock()
        self._users = 0
        self.saved = None

    @contextmanager
    def applied(self, install: Callable[[], object],
                remove: Callable[[object], None]) -> Iterator[None]:
        """The patch in place for the block: ``install()`` at the first user, returning
        what ``remove(saved)`` needs at the last."""
        with self._lock:
            if self._users == 0:
                self.saved = install()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    remove(self.saved)
                    self.saved = None
