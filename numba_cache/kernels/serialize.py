"""Turning numba compile results into bytes and back, the way numba's own cache does.

We attach our own cache object to each dispatcher (``dispatcher._cache``, a
``numba.core.caching._Cache``) instead of plugging a locator into numba's
``FunctionCache``. numba calls ``load_overload`` before compiling and
``save_overload`` after; we store ``CompileResult._reduce()`` serialized with
``numba.core.serialize`` and rebuild it with ``CompileResult._rebuild`` after
``target_context.refresh()``, exactly as ``numba.core.caching.CompileResultCacheImpl``
does, minus numba's file format and index. That keeps numba's own safety (the
serialized library is object code for one CPU; the fingerprint pins CPU name,
features and library versions) while we own keys, files, locks and checksums.

This is private numba API, hence the pinned numba range, the numba version in
the fingerprint, and :func:`self_test`, which round-trips a tiny kernel once per
fingerprint and turns the cache off (one warning) if that ever stops working.
"""

from __future__ import annotations

from numba.core import serialize
from numba.core.compiler import CompileResult


def dump_compile_result(cres) -> bytes:
    return serialize.dumps(cres._reduce())


def load_compile_result(payload: bytes, target_context) -> CompileResult:
    target_context.refresh()
    return CompileResult._rebuild(target_context, *serialize.loads(payload))


def self_test() -> None:
    """Compile, serialize, rebuild and call a tiny kernel; raise if anything differs."""
    import numba
    import numpy as np

    @numba.njit(cache=False)
    def probe(values):
        return (values * 2.0).sum()

    values = np.arange(4.0)
    expected = probe(values)
    dispatcher = probe
    cres = dispatcher.overloads[dispatcher.signatures[0]]
    rebuilt = load_compile_result(dump_compile_result(cres), dispatcher.targetctx)
    result = rebuilt.entry_point(values)
    if result != expected:
        raise RuntimeError(f"rebuilt kernel returned {result}, expected {expected}")
