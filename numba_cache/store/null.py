"""The store of a process whose cache is disabled: it holds nothing and writes nothing.

A compile's context (:mod:`numba_cache.kernels.context`) takes one when
``settings.disabled`` is set, so that the real :class:`~.store.Store` need not ask, in
every method, whether it is switched off.
It has what a compile asks of a store; maintenance (the command line) always
opens the real store.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..settings import Settings
from .entry import Entry
from .local import LocalBackend


class NullStore:
    """A store that serves no entry and keeps nothing: every lookup misses, every save is refused."""

    readonly = True
    remote = None

    def __init__(self, settings: Settings):
        self.settings = settings
        self.root = Path(settings.root)

    def load(self, fingerprint: str, key: str) -> Entry | None:
        return None

    def save(self, entry: Entry, source: str | None = None) -> bool:
        return False

    def lock(self, fingerprint: str, key: str) -> contextlib.AbstractContextManager[bool]:
        return contextlib.nullcontext(False)

    def bookkeeping_together(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def count(self, fingerprint: str, name: str, n: int = 1) -> None:
        pass

    def remove(self, fingerprint: str, key: str) -> None:
        pass

    def report_write_error(self, fingerprint: str, error: OSError) -> None:
        pass

    def source_path(self, fingerprint: str, key: str) -> Path:
        """The name compiled source is labelled with: where the real store would keep it."""
        return LocalBackend(self.root).source_path(fingerprint, key)

    def fingerprint_components(self, fingerprint: str) -> dict | None:
        return None

    def record_fingerprint(self, fingerprint: str, components: dict) -> None:
        pass

    def vouch(self, fingerprint: str, components: dict) -> None:
        pass

    def publish_stored(self, fingerprint: str, key: str) -> None:
        pass

    def vouched(self, fingerprint: str) -> bool:
        return False

    def completed_registry(self, fingerprint: str, partial: str, far: bool = False
                           ) -> str | None:
        return None

    def record_completed_registry(self, fingerprint: str, partial: str, complete: str,
                                  far: bool = False) -> None:
        pass

    def graph_of_code(self, fingerprint: str, code: str) -> str | None:
        return None

    def record_graph_of_code(self, fingerprint: str, code: str, key: str,
                             far: bool = False) -> None:
        pass

    def op_keys_of(self, fingerprint: str, graph: str) -> list[str] | None:
        return None

    def record_op_keys_of(self, fingerprint: str, graph: str, keys: list[str],
                          far: bool = False) -> None:
        pass

    def lengths_read(self, fingerprint: str) -> dict[str, bool]:
        return {}

    def record_lengths_read(self, fingerprint: str, found: dict[str, bool]) -> None:
        pass

    def derived_code(self, fingerprint: str, key: str) -> bytes | None:
        return None

    def record_derived_code(self, fingerprint: str, key: str, body: bytes) -> None:
        pass

    def claim_linking(self, fingerprint: str, key: str, stale_after: float) -> bool:
        return False

    def release_linking(self, fingerprint: str, key: str, failure: str | None) -> None:
        pass

    def linking_claims(self) -> list[dict]:
        return []
