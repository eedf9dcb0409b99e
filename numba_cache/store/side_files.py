"""Side files of a fingerprint's directory: what its digest stands for, registry digests,
and which graph kernel holds a given code.

None is needed to load a kernel: they explain a miss ("numba 0.68.0 became
0.69.0"), save a rewrite-registry recomputation, or find a graph kernel another
graph of the same code compiled (:func:`numba_cache.keys.kernels.graph_code_key`).
So all are written atomically and silently (a failure costs time, never a
result), and an unreadable or damaged file reads as unknown. The code index
names an entry, which may have been evicted or damaged since: then it is a miss.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

from .entry import check_name, is_sha256_hex
from .local import LocalBackend

#: The components of a fingerprint, kept in its directory (see ``record_fingerprint``).
FINGERPRINT_NAME = "fingerprint.json"
REGISTRIES_NAME = "registries.json"
#: The directory of the code index: one file per code key, holding a graph key.
CODE_INDEX_NAME = "by_code"


class SideFiles:
    """The side files under `root`; written only while `writable()` says so."""

    def __init__(self, backend: LocalBackend, root: Path, writable: Callable[[], bool]):
        self._backend = backend
        self._root = root
        self._writable = writable

    def record_fingerprint(self, fingerprint: str, components: dict) -> None:
        """Keep the named components of `fingerprint` beside its entries.

        Entries only carry the fingerprint's digest; this file is what lets a miss
        be explained as "numba 0.68.0 became 0.69.0". Written atomically when
        :meth:`fingerprint_components` cannot read it (missing, damaged, or another
        fingerprint's), so a damaged file does not stay damaged; does nothing on a
        disabled or read-only store. It is a description, not needed to load
        anything, so a failure is silent.
        """
        check_name("fingerprint", fingerprint)
        if not self._writable():
            return
        if self.fingerprint_components(fingerprint) is not None:
            return
        text = json.dumps({"fingerprint": fingerprint, "components": components}, sort_keys=True)
        with contextlib.suppress(OSError):
            self._backend.put_file(self._root / fingerprint / FINGERPRINT_NAME, text.encode())

    def fingerprint_components(self, fingerprint: str) -> dict | None:
        """The components kept by :meth:`record_fingerprint`, or None if unknown or unreadable.

        A file describing another fingerprint (a misplaced copy) is unreadable too.
        """
        check_name("fingerprint", fingerprint)
        try:
            recorded = json.loads((self._root / fingerprint / FINGERPRINT_NAME).read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(recorded, dict) or recorded.get("fingerprint") != fingerprint:
            return None
        components = recorded.get("components")
        return components if isinstance(components, dict) else None

    def completed_registry(self, fingerprint: str, partial: str) -> str | None:
        """The complete rewrite-registry digest recorded for `partial`, or None.

        See :func:`numba_cache.keys.rewrites.complete_rewrites_digest`; an
        unreadable or damaged record reads as empty.
        """
        return self._registries(fingerprint).get(partial)

    def record_completed_registry(self, fingerprint: str, partial: str, complete: str) -> None:
        """Remember that the registry digest `partial` completes to `complete`.

        Written atomically beside the entries (a concurrent writer can win the
        race, costing a later process one recomputation); silent when the store
        is read-only, disabled or cannot be written, since it only saves time.
        """
        check_name("fingerprint", fingerprint)
        if not self._writable():
            return
        known = self._registries(fingerprint) | {partial: complete}
        text = json.dumps({"fingerprint": fingerprint, "complete": known}, sort_keys=True)
        with contextlib.suppress(OSError):
            self._backend.put_file(self._root / fingerprint / REGISTRIES_NAME, text.encode())

    def _registries(self, fingerprint: str) -> dict[str, str]:
        check_name("fingerprint", fingerprint)
        try:
            recorded = json.loads((self._root / fingerprint / REGISTRIES_NAME).read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(recorded, dict) or recorded.get("fingerprint") != fingerprint:
            return {}
        known = recorded.get("complete")
        if not isinstance(known, dict):
            return {}
        return {
            partial: complete for partial, complete in known.items()
            if is_sha256_hex(partial) and isinstance(complete, str) and is_sha256_hex(complete)
        }

    def graph_of_code(self, fingerprint: str, code: str) -> str | None:
        """The key of the graph kernel last stored with the code key `code`, or None."""
        check_name("fingerprint", fingerprint)
        if not is_sha256_hex(code):
            raise ValueError(f"code key must be a sha256 hex digest, got {code!r}")
        try:
            key = (self._root / fingerprint / CODE_INDEX_NAME / code).read_bytes().decode()
        except (OSError, ValueError):
            return None
        return key if is_sha256_hex(key) else None

    def record_graph_of_code(self, fingerprint: str, code: str, key: str) -> None:
        """Remember that graph kernel `key` holds the code of code key `code`."""
        check_name("fingerprint", fingerprint)
        if not (is_sha256_hex(code) and is_sha256_hex(key)):
            raise ValueError("code and graph keys must be sha256 hex digests")
        if not self._writable() or self.graph_of_code(fingerprint, code) == key:
            return
        with contextlib.suppress(OSError):
            self._backend.put_file(self._root / fingerprint / CODE_INDEX_NAME / code, key.encode())
