"""A kernel cache's storing: what numba compiled, stored, or why it is not.

numba hands a kernel cache each compile result (``save_overload``). It is
stored as one overload of the kernel's entry, with the digest of its code (for
the collision detector, :mod:`.ir_digest`), the symbols it defines and the object-mode blocks it
holds; a kernel that must not be stored is stored as a marker of its verdict.
Code loaded from a cache is never stored again.
"""

from __future__ import annotations

import time

from numba_cache._compat import numba_internals
from numba_cache.kernels.helpers import compile_ahead
from numba_cache.kernels.outcomes import collisions, replay, report
from numba_cache.kernels.outcomes.uncacheable import Uncacheable, inspect_compile_result
from numba_cache.kernels.protocol import stored_library
from numba_cache.kernels.protocol.ir_digest import CodeDigests
from numba_cache.kernels.protocol.serialize import dump_compile_result
from numba_cache.kernels.runtime import blocks as object_mode_blocks
from numba_cache.kernels.runtime import detached
from numba_cache.store import Entry, entry_layout


class KernelStorage:
    """``save_overload`` of :class:`.KernelCache`, whose state it shares."""

    def save_overload(self, sig, cres):
        compile_ahead.note_save(self._key.kind, self._key.digest, sig)
        if not self._persistent or self._verdict_is_stored:
            return
        verdict, llvm_ir, digests = self._verdict, None, None
        served = self._verification.pending(sig)
        if (served is not None or verdict is None) and not numba_internals.inspectable(
                cres.library):
            # Code loaded from a cache (numba's own, or a block from this store) was not
            # compiled here: its IR cannot be read, so it can be neither checked nor stored.
            return
        if served is not None:
            llvm_ir = cres.library.get_llvm_str()
            digests = self._digests(cres, llvm_ir)
            if collisions.served_code_matches(self._context, self._key, served, sig, digests):
                return
            self._collided(sig, cres)
        if verdict is None:
            llvm_ir = llvm_ir or cres.library.get_llvm_str()
            verdict = inspect_compile_result(cres, llvm_ir, self.object_mode,
                                             self.self_contained_only)
        if verdict is not None:
            if self._verdict is None:
                self._verdict = verdict
            self._report_verdict()
            self._save(cacheable=False, verdict=verdict, blobs={})
            self._verdict_is_stored = True
            return
        blobs = self._existing_blobs()
        if self.ir_digested:
            digests = digests or self._digests(cres, llvm_ir)
            blobs.update(entry_layout.encode_code_digests(sig, *digests))
        blocks = self._blocks_held(llvm_ir, blobs)
        # A large graph's IR text is megabytes: let it go before the payload is made.
        del llvm_ir
        self._store_compiled(sig, cres, blobs, blocks)

    def _digests(self, cres, llvm_ir: str) -> CodeDigests:
        return CodeDigests.of(cres.library, llvm_ir, self._function_name)

    def _collided(self, sig, cres) -> None:
        """The entry served for `sig` held another kernel's code: it was removed."""
        self._entry = None  # none of its overloads may be kept

    def _existing_blobs(self) -> dict:
        existing = self._entry
        return dict(existing.blobs) if existing is not None and existing.cacheable else {}

    def _blocks_held(self, llvm_ir: str, blobs: dict) -> list[str]:
        """The object-mode blocks of this kernel (:mod:`.blocks`): those its IR names, and
        those of its overloads already in `blobs`."""
        return object_mode_blocks.named_blocks(
            llvm_ir, *entry_layout.decode_blocks(blobs.get(entry_layout.BLOCKS_BLOB)))

    def _store_compiled(self, sig, cres, blobs: dict, blocks: list[str]) -> None:
        try:
            blobs[entry_layout.overload_blob_name(sig)] = dump_compile_result(
                cres, self._environment_reads())
            blobs[entry_layout.symbols_blob_name(sig)] = stored_library.defined_symbols(
                cres.library)
        except Exception as exc:
            verdict = Uncacheable("unserializable", f"numba could not serialize it: {exc!r}")
            report.uncacheable(self._context, self._key, verdict)
            return
        blobs.update(self._calls_blobs(sig))
        object_mode_blocks.note_blocks(blocks)
        if blocks:
            blobs[entry_layout.BLOCKS_BLOB] = entry_layout.encode_blocks(blocks)
            namespaces = detached.namespaces_of(blocks)
            if namespaces is not None:
                blobs[entry_layout.DETACHED_BLOB] = namespaces
        self._save(cacheable=True, verdict=None, blobs=blobs)
        self._stored(sig)
        self._store_blocks_compiled_here(blocks)

    def _environment_reads(self) -> list[str] | None:
        """The globals an object-mode kernel's code reads; None for nopython code."""
        return None

    def _calls_blobs(self, sig) -> dict:
        """Blobs naming what the kernel for `sig` calls, to be loaded before it."""
        return {}

    def _stored(self, sig) -> None:
        """What storing the kernel for `sig` entails besides (nothing here)."""

    def _save(self, cacheable: bool, verdict: Uncacheable | None, blobs: dict):
        components = dict(self._key.components)
        if verdict is not None:
            components["detail"] = verdict.detail
        said = replay.about_the_graph(self._warnings)
        if cacheable and said:  # an uncacheable kernel converts, and warns, every time
            blobs = blobs | {entry_layout.WARNINGS_BLOB: entry_layout.encode_warnings(said)}
        entry = Entry(
            key=self._key.digest,
            fingerprint=self._context.fingerprint.digest,
            kind=self._key.kind,
            summary=self._key.summary,
            components=components,
            cacheable=cacheable,
            reason=None if verdict is None else verdict.reason,
            created=time.time(),
            blobs=blobs,
        )
        self._context.store.save(entry, source=self._source)
