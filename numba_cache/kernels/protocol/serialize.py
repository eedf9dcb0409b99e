"""Turning numba compile results into bytes and back, the way numba's own cache does.

We attach our own cache object to each dispatcher (``dispatcher._cache``, a
``numba.core.caching._Cache``) instead of plugging a locator into numba's
``FunctionCache``. numba calls ``load_overload`` before compiling and
``save_overload`` after; we store ``CompileResult._reduce()`` serialized with
numba's pickler and rebuild it with ``CompileResult._rebuild``, as
``numba.core.caching.CompileResultCacheImpl`` does, minus numba's file format
and index. That keeps numba's own safety (the serialized library is object code
for one CPU; the fingerprint pins CPU name, features and library versions)
while we own keys, files, locks and checksums.

Two departures from numba's cache, both to make a warm load cheap:

- Loading initialises numba's runtime (NRT) only, not the whole target context
  (``target_context.refresh()`` imports every lowering registry, scipy.linalg
  included). Running machine code needs the runtime; the registries are for
  compiling, and numba's compiler refreshes the context itself before any compile.
- Environments of nopython functions are stored against our small
  :mod:`numba_cache.codegen.generated` module instead of the module they were
  defined in. numba rebuilds an environment by importing that module, which for
  PyTensor's kernels means importing all of its numba dispatch; nopython code
  never reads environment globals at run time. Object-mode code does: the
  object-mode blocks persisted by :mod:`.objmode` keep their module, found as
  :mod:`.detached` says (without importing PyTensor's dispatch where it can).

This is private numba API, hence the pinned numba range, the numba version in
the fingerprint, and :func:`self_test`, which round-trips a tiny kernel once per
fingerprint and turns the cache off (one warning) if that ever stops working.
"""

from __future__ import annotations

import io

from numba.core import serialize
from numba.core.compiler import CompileResult
from numba.core.environment import Environment, _rebuild_env
from numba.core.runtime import rtsys

from numba_cache._compat import numba_internals
from numba_cache.codegen import generated
from numba_cache.kernels.protocol import stored_library
from numba_cache.kernels.runtime import detached


class _KernelPickler(serialize.NumbaPickler):
    def reducer_override(self, obj):
        if type(obj) is Environment:
            return _rebuild_env, (generated.__name__, obj.consts, obj.env_name)
        return super().reducer_override(obj)


class _ObjectModePickler(serialize.NumbaPickler):
    """Pickles environments against their own module, with the globals `reads` their
    code reads (:func:`.detached.rebuild_environment`)."""

    def __init__(self, file, reads: list[str]):
        super().__init__(file, protocol=4)
        self._reads = reads

    def reducer_override(self, obj):
        if type(obj) is Environment:
            return detached.rebuild_environment, (
                numba_internals.environment_module(obj), self._reads,
                *numba_internals.environment_state(obj))
        return super().reducer_override(obj)


def dump_compile_result(cres, environment_reads: list[str] | None = None) -> bytes:
    """`cres` as bytes. Object-mode code (see :mod:`.objmode`) reads its globals from
    its environment at run time: for it, `environment_reads` names them, and its
    environment keeps its own module."""
    with io.BytesIO() as buffer:
        pickler = (_KernelPickler(buffer, protocol=4) if environment_reads is None
                   else _ObjectModePickler(buffer, environment_reads))
        pickler.dump(numba_internals.reduce_compile_result(
            cres, every_environment=environment_reads is None))
        return buffer.getvalue()


def load_compile_result(payload: bytes, target_context, symbols: bytes | None = None
                        ) -> CompileResult:
    """The compile result `payload` holds; with the `symbols` its code defines
    (:func:`.stored_library.defined_symbols`), its linking module is parsed only if linked."""
    rtsys.initialize(target_context)
    load_library = None if symbols is None else (
        lambda codegen, state: stored_library.load(codegen, state, symbols))
    return numba_internals.rebuild_compile_result(
        target_context, serialize.loads(payload), load_library, detached.module_stand_in)


def self_test() -> None:
    """Compile, serialize, rebuild and call a tiny kernel; raise if anything differs.

    The probe allocates and returns an array, so the rebuilt code needs the
    runtime (NRT) and boxing; a copy with one element changed rather than an array
    expression or a loop keeps its compile to about 0.05 s, which the first cold
    compile of a store pays, and a rebuilt kernel returning its argument fails.
    """
    import numba
    import numpy as np

    @numba.njit(cache=False)
    def probe(values):
        changed = values.copy()
        changed[0] = -1.0
        return changed

    values = np.arange(4.0)
    expected = probe(values)
    cres = probe.overloads[probe.signatures[0]]
    rebuilt = load_compile_result(dump_compile_result(cres), probe.targetctx,
                                  stored_library.defined_symbols(cres.library))
    result = rebuilt.entry_point(values)
    if not np.array_equal(result, expected):
        raise RuntimeError(f"rebuilt kernel returned {result}, expected {expected}")
