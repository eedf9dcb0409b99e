"""Side files of a fingerprint's directory: what its digest stands for, registry digests,
which graph kernel holds a given code, which op kernels a graph of any static lengths
calls, which linked graph kernels are being built, and code numba_cache derived from
upstream's (checksummed: it runs).

None is needed to load a kernel: they explain a miss ("numba 0.68.0 became
0.69.0"), save a rewrite-registry recomputation, find a graph kernel another
graph of the same code compiled (:func:`numba_cache.keys.kernels.graph_code_key`),
or save converting a graph's ops to learn that code.
So all are written atomically and silently (a failure costs time, never a
result), and an unreadable or damaged file reads as unknown. The code index
names an entry, which may have been evicted or damaged since: then it is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from .entry import check_name, is_sha256_hex
from .local import LocalBackend

#: The components of a fingerprint, kept in its directory (see ``record_fingerprint``).
FINGERPRINT_NAME = "fingerprint.json"
REGISTRIES_NAME = "registries.json"
#: The directory of the code index: one file per code key, holding a graph key.
CODE_INDEX_NAME = "by_code"
#: The directory of remembered op kernel keys: one file per lengths-free graph key
#: (:func:`numba_cache.keys.kernels.lengths_free_key`), naming the op kernels of its steps.
OP_KEYS_NAME = "op_keys"
#: Whether an op kernel's conversion reads a static length or a constant, by its key.
LENGTHS_READ_NAME = "lengths_read.json"
#: The directory of the linking claims: one file per linked graph kernel being built,
#: or whose build failed (:mod:`numba_cache.kernels.helpers.linked_build`).
LINKING_NAME = "linking"
#: The directory of derived code: one file per derivation key, its sha256 then its bytes
#: (:mod:`numba_cache._compat.sparse_import`).
DERIVED_CODE_NAME = "derived_code"
#: How long a failed build keeps others from trying it again, in seconds.
FAILED_LINKING_HOLDS = 86400.0


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

    def registries(self, fingerprint: str) -> dict[str, str]:
        """Every registry digest recorded for `fingerprint`, to its complete digest."""
        return self._registries(fingerprint)

    def _registries(self, fingerprint: str) -> dict[str, str]:
        known = self._json_table(fingerprint, REGISTRIES_NAME, "complete")
        return {
            partial: complete for partial, complete in known.items()
            if is_sha256_hex(partial) and isinstance(complete, str) and is_sha256_hex(complete)
        }

    def _json_table(self, fingerprint: str, name: str, field: str) -> dict:
        """The table `field` of the JSON side file `name` of `fingerprint`; empty when the
        file is missing, unreadable, damaged or another fingerprint's."""
        check_name("fingerprint", fingerprint)
        try:
            recorded = json.loads((self._root / fingerprint / name).read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(recorded, dict) or recorded.get("fingerprint") != fingerprint:
            return {}
        table = recorded.get(field)
        return table if isinstance(table, dict) else {}

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

    def code_index(self, fingerprint: str) -> dict[str, str]:
        """Every code key recorded for `fingerprint`, to the graph kernel key holding it."""
        return self._table_of_files(fingerprint, CODE_INDEX_NAME, self.graph_of_code)

    def remembered_op_keys(self, fingerprint: str) -> dict[str, list[str]]:
        """Every lengths-free graph key recorded for `fingerprint`, to its op kernel keys."""
        return self._table_of_files(fingerprint, OP_KEYS_NAME, self.op_keys_of)

    def _table_of_files(self, fingerprint: str, name: str, read) -> dict:
        """The readable values of the one-file-per-key directory `name`, by file name."""
        check_name("fingerprint", fingerprint)
        try:
            names = sorted(path.name for path in (self._root / fingerprint / name).iterdir())
        except OSError:
            return {}
        values = {about: read(fingerprint, about) for about in names if is_sha256_hex(about)}
        return {about: value for about, value in values.items() if value is not None}

    def op_keys_of(self, fingerprint: str, graph: str) -> list[str] | None:
        """The op kernel keys recorded for lengths-free graph key `graph`, one per step of its
        graph kernel, or None."""
        check_name("fingerprint", fingerprint)
        if not is_sha256_hex(graph):
            raise ValueError(f"graph key must be a sha256 hex digest, got {graph!r}")
        try:
            keys = (self._root / fingerprint / OP_KEYS_NAME / graph).read_bytes().decode().split()
        except (OSError, ValueError):
            return None
        return keys if keys and all(is_sha256_hex(key) for key in keys) else None

    def record_op_keys_of(self, fingerprint: str, graph: str, keys: list[str]) -> None:
        """Remember that the steps of lengths-free graph key `graph` call op kernels `keys`."""
        check_name("fingerprint", fingerprint)
        if not (is_sha256_hex(graph) and keys and all(is_sha256_hex(key) for key in keys)):
            raise ValueError("graph and op kernel keys must be sha256 hex digests")
        if not self._writable() or self.op_keys_of(fingerprint, graph) == keys:
            return
        with contextlib.suppress(OSError):
            self._backend.put_file(self._root / fingerprint / OP_KEYS_NAME / graph,
                                   "\n".join(keys).encode())

    def lengths_read(self, fingerprint: str) -> dict[str, bool]:
        """Whether each op kernel's conversion was found to read a static length or a
        constant, by the op kernel's key; an unreadable or damaged record reads as empty."""
        found = self._json_table(fingerprint, LENGTHS_READ_NAME, "reads")
        return {key: reads for key, reads in found.items()
                if is_sha256_hex(key) and isinstance(reads, bool)}

    def record_lengths_read(self, fingerprint: str, found: dict[str, bool]) -> None:
        """Add `found` (op kernel key to whether its conversion reads a length) to the record;
        written atomically (a concurrent writer can win the race, costing a later
        process a check again), silently, since it only saves time."""
        check_name("fingerprint", fingerprint)
        if not self._writable() or not found:
            return
        known = self.lengths_read(fingerprint) | found
        text = json.dumps({"fingerprint": fingerprint, "reads": known}, sort_keys=True)
        with contextlib.suppress(OSError):
            self._backend.put_file(self._root / fingerprint / LENGTHS_READ_NAME, text.encode())

    def derived_code(self, fingerprint: str, key: str) -> bytes | None:
        """The bytes recorded under derivation key `key`, or None when there are none or they
        fail their checksum (a torn or damaged file reads as unknown)."""
        check_name("fingerprint", fingerprint)
        check_name("derivation key", key)
        try:
            recorded = (self._root / fingerprint / DERIVED_CODE_NAME / key).read_bytes()
        except OSError:
            return None
        checksum, body = recorded[:32], recorded[32:]
        return body if hashlib.sha256(body).digest() == checksum else None

    def record_derived_code(self, fingerprint: str, key: str, body: bytes) -> None:
        """Remember `body` under derivation key `key`, with its checksum; silent when the
        store cannot be written, since it only saves time."""
        check_name("fingerprint", fingerprint)
        check_name("derivation key", key)
        if not self._writable() or self.derived_code(fingerprint, key) == body:
            return
        with contextlib.suppress(OSError):
            self._backend.put_file(self._root / fingerprint / DERIVED_CODE_NAME / key,
                                   hashlib.sha256(body).digest() + body)

    def claim_linking(self, fingerprint: str, key: str, stale_after: float) -> bool:
        """Whether this process may build linked graph kernel `key`: none claimed it within
        `stale_after` seconds (a build still running) and no build of it failed within
        :data:`FAILED_LINKING_HOLDS`. If so, the claim is this process's."""
        check_name("fingerprint", fingerprint)
        if not (is_sha256_hex(key) and self._writable()):
            return False
        path = self._root / fingerprint / LINKING_NAME / key
        claim = json.dumps({"state": "building", "pid": os.getpid()}).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "xb") as file:
                file.write(claim)
            return True
        except FileExistsError:
            pass
        except OSError:
            return False
        try:
            age = time.time() - path.stat().st_mtime
            state = json.loads(path.read_bytes()).get("state")
        except (OSError, ValueError, AttributeError):
            age, state = float("inf"), None  # unreadable: no claim stands
        if age < (FAILED_LINKING_HOLDS if state == "failed" else stale_after):
            return False
        with contextlib.suppress(OSError):
            self._backend.put_file(path, claim)
            return True
        return False

    def release_linking(self, fingerprint: str, key: str, failure: str | None) -> None:
        """End this process's claim on linked graph kernel `key`: built, or failed for
        the reason `failure` (kept, so that others do not try it again soon)."""
        check_name("fingerprint", fingerprint)
        if not is_sha256_hex(key):
            return
        path = self._root / fingerprint / LINKING_NAME / key
        with contextlib.suppress(OSError):
            if failure is None:
                path.unlink(missing_ok=True)
            else:
                self._backend.put_file(
                    path, json.dumps({"state": "failed", "reason": failure}).encode())

    def linking_claims(self) -> list[dict]:
        """Every linking claim: ``fingerprint``, ``key``, ``state`` (``building`` or
        ``failed``), ``since`` (when it was made, in seconds since the epoch) and, if
        failed, ``reason``; unreadable ones left out."""
        claims = []
        for path in sorted(self._root.glob(f"*/{LINKING_NAME}/*")):
            try:
                since = path.stat().st_mtime
                recorded = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(recorded, dict) and recorded.get("state") in ("building", "failed"):
                claims.append({"fingerprint": path.parent.parent.name, "key": path.name,
                               "state": recorded["state"], "since": since,
                               "reason": recorded.get("reason")})
        return claims


class SideFilesOfStore:
    """The side files as methods of a store (a base of :class:`~.store.Store`): lookups
    read them beside the entries."""

    _side_files: SideFiles

    def record_fingerprint(self, fingerprint: str, components: dict) -> None:
        """Keep the components of `fingerprint` beside its entries (:mod:`.side_files`)."""
        self._side_files.record_fingerprint(fingerprint, components)

    def fingerprint_components(self, fingerprint: str) -> dict | None:
        return self._side_files.fingerprint_components(fingerprint)

    def completed_registry(self, fingerprint: str, partial: str) -> str | None:
        return self._side_files.completed_registry(fingerprint, partial)

    def record_completed_registry(self, fingerprint: str, partial: str, complete: str) -> None:
        self._side_files.record_completed_registry(fingerprint, partial, complete)

    def side_tables(self, fingerprint: str) -> dict[str, dict]:
        """What the side files of `fingerprint` record, by table: ``registries`` (partial to
        complete digest), ``code_index`` (code key to graph kernel key) and
        ``remembered_op_keys`` (lengths-free graph key to op kernel keys)."""
        return {"registries": self._side_files.registries(fingerprint),
                "code_index": self._side_files.code_index(fingerprint),
                "remembered_op_keys": self._side_files.remembered_op_keys(fingerprint)}

    def graph_of_code(self, fingerprint: str, code: str) -> str | None:
        """The graph kernel key last stored with code key `code` (:mod:`.side_files`)."""
        return self._side_files.graph_of_code(fingerprint, code)

    def record_graph_of_code(self, fingerprint: str, code: str, key: str) -> None:
        self._side_files.record_graph_of_code(fingerprint, code, key)

    def op_keys_of(self, fingerprint: str, graph: str) -> list[str] | None:
        """The op kernel keys recorded for lengths-free graph key `graph` (:mod:`.side_files`)."""
        return self._side_files.op_keys_of(fingerprint, graph)

    def record_op_keys_of(self, fingerprint: str, graph: str, keys: list[str]) -> None:
        self._side_files.record_op_keys_of(fingerprint, graph, keys)

    def lengths_read(self, fingerprint: str) -> dict[str, bool]:
        """Whether op kernels' conversions read a static length, by key (:mod:`.side_files`)."""
        return self._side_files.lengths_read(fingerprint)

    def record_lengths_read(self, fingerprint: str, found: dict[str, bool]) -> None:
        self._side_files.record_lengths_read(fingerprint, found)

    def derived_code(self, fingerprint: str, key: str) -> bytes | None:
        """The derived code recorded under `key`, checksum verified (:mod:`.side_files`)."""
        return self._side_files.derived_code(fingerprint, key)

    def record_derived_code(self, fingerprint: str, key: str, body: bytes) -> None:
        self._side_files.record_derived_code(fingerprint, key, body)

    def claim_linking(self, fingerprint: str, key: str, stale_after: float) -> bool:
        """Whether this process may build linked graph kernel `key` (:mod:`.side_files`)."""
        return self._side_files.claim_linking(fingerprint, key, stale_after)

    def release_linking(self, fingerprint: str, key: str, failure: str | None) -> None:
        self._side_files.release_linking(fingerprint, key, failure)

    def linking_claims(self) -> list[dict]:
        """The linked builds running or failed (:meth:`.side_files.SideFiles.linking_claims`)."""
        return self._side_files.linking_claims()
