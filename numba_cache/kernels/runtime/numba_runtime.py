"""numba's runtime functions (NRT), loaded from the store instead of compiled in every process.

Before a process runs its first kernel, numba initialises its runtime, which
compiles a small LLVM module of reference-counting and allocation functions:
about 20 ms, as long as loading 15 op kernels, in every warm process. The
library is the same for every process of a fingerprint, so it is stored once as
a ``runtime`` entry (its object code, linking bitcode and defined symbols, as a
kernel's, see :mod:`.stored_library`) and loaded from then on.

It is initialised at a process's first kernel lookup, or before the self-test
of a new fingerprint compiles anything. A runtime entry that cannot be loaded
is removed and the functions compiled again, as any corrupt entry; if
initialising fails at all, numba initialises its runtime its own way.
"""

from __future__ import annotations

from numba_cache import versions
from numba_cache._compat import numba_internals
from numba_cache.kernels.outcomes import report
from numba_cache.kernels.protocol import stored_library
from numba_cache.keys.key import Key
from numba_cache.logs import logger
from numba_cache.store import Entry
from numba_cache.store.entry_layout import (RUNTIME_BITCODE_BLOB, RUNTIME_OBJECT_BLOB,
                                            RUNTIME_SYMBOLS_BLOB)

_LIBRARY_NAME = "nrt"


def runtime_key(fingerprint) -> Key:
    return Key.from_components("runtime", "numba's runtime functions (NRT)", {
        "fingerprint": fingerprint.digest,
        "codegen": versions.CODEGEN,
    })


def initialize(context, target_context, save: bool = True):
    """Initialise numba's runtime in this process, its functions loaded from the store
    when they are there, compiled otherwise; nothing if it already is.

    What was compiled is stored, unless not `save`: then the library is returned,
    for :func:`store` once the store may be written (the self-test passed).
    """
    if numba_internals.runtime_initialized():
        return None
    key = runtime_key(context.fingerprint)
    compiled = []

    def make_library(codegen_context):
        library = _load(context, key, codegen_context)
        if library is None:
            library = numba_internals.compile_runtime_library(codegen_context)
            compiled.append(library)
        return library

    try:
        numba_internals.initialize_runtime(target_context, make_library)
    except Exception as exc:  # numba initialises it its own way at its first compile
        logger.info("numba_cache could not initialise numba's runtime: %r", exc)
        return None
    if not compiled:
        return None
    if not save:
        return compiled[0]
    store(context, compiled[0])
    return None


def _load(context, key: Key, target_context):
    entry = context.store.load(context.fingerprint.digest, key.digest)
    if entry is None or not entry.cacheable:
        return None
    try:
        state = (_LIBRARY_NAME, "object",
                 (entry.blobs[RUNTIME_OBJECT_BLOB], entry.blobs[RUNTIME_BITCODE_BLOB]))
        symbols = entry.blobs.get(RUNTIME_SYMBOLS_BLOB)
        if symbols is None:
            return target_context.codegen().unserialize_library(state)
        return stored_library.load(target_context.codegen(), state, symbols)
    except Exception as exc:  # any failure to load means the entry is unusable
        report.remove_corrupt(context, key.digest, f"the stored runtime functions {key.short}: "
                              f"they could not be loaded: {exc!r}; compiling them", stacklevel=4)
        return None


def store(context, library) -> None:
    """Store the runtime `library` compiled in this process (:func:`initialize`)."""
    key = runtime_key(context.fingerprint)
    try:
        _, _, (object_code, bitcode) = library.serialize_using_object_code()
        symbols = stored_library.defined_symbols(library)
    except Exception as exc:  # storing is an optimisation: never a failed initialisation
        logger.info("numba_cache does not store numba's runtime functions: %r", exc)
        return
    context.store.save(Entry(
        key=key.digest,
        fingerprint=context.fingerprint.digest,
        kind=key.kind,
        summary=key.summary,
        components=dict(key.components),
        blobs={RUNTIME_OBJECT_BLOB: object_code, RUNTIME_BITCODE_BLOB: bitcode,
               RUNTIME_SYMBOLS_BLOB: symbols},
    ), source=None)
