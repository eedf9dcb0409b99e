"""The cache as a compile consults it: settings, store, fingerprint, self-test verdict.

The contexts and stores made are kept in the session (:mod:`numba_cache.session`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from numba_cache import _compat, logs, session
from numba_cache import settings as settings_module
from numba_cache.kernels import probes
from numba_cache.kernels.outcomes import replaced_numba
from numba_cache.kernels.runtime import numba_runtime as runtime
from numba_cache.keys import Fingerprint, current_fingerprint
from numba_cache.keys.fingerprint import PYTENSOR_FLAGS, numba_settings
from numba_cache.store import NullStore, Store, StoreWarning
from numba_cache.store.notices import warn_once


@dataclass(frozen=True)
class CacheContext:
    """What a compile needs to consult the cache. `enabled` is False when the cache
    is disabled by settings or turned itself off after a failed self-test.

    `op_kernels` holds this process's cacheable op kernels by key digest: nodes
    with the same key share one dispatcher, so it is compiled or loaded once and
    called by symbol from (under ``link_op_kernels``: linked into) each graph kernel.
    """

    settings: settings_module.Settings
    store: Store | NullStore
    fingerprint: Fingerprint
    enabled: bool
    op_kernels: dict = field(default_factory=dict, compare=False, repr=False)
    #: Whether an op kernel's conversion reads a static length or a constant, by its key
    #: digest, once checked (:mod:`numba_cache.kernels.assembly.remembered_op_keys`).
    lengths_read: dict = field(default_factory=dict, compare=False, repr=False)
    #: The PyTensor flags and numba settings the fingerprint was read under
    #: (:func:`compile_state`), put back in force around a compile (:func:`flags_in_force`).
    state: dict = field(default_factory=dict, compare=False, repr=False)

    def source_label(self, key, verdict) -> str:
        """The file name the generated source of `key` is compiled under: its copy in the
        store (none for an unkeyable kernel, whose `verdict` says so)."""
        if verdict is not None and verdict.reason == "unkeyable":
            return f"<numba_cache unkeyed {key.short}>"
        return str(self.store.source_path(self.fingerprint.digest, key.digest))


def current_context() -> CacheContext:
    """The context for the settings and PyTensor flags in force now.

    While test doubles stand in for numba's compiler, the cache is off and nothing
    about it is concluded or remembered (:mod:`.replaced_numba`).
    """
    try:
        settings = settings_module.current()
        fingerprint = current_fingerprint()
    except settings_module.SettingsError as error:
        return _context_without_cache(error)
    if replaced_numba.replaced() is not None:
        return CacheContext(settings, NullStore(settings), fingerprint, enabled=False)
    return session.current().contexts.get((settings, fingerprint.digest),
                                          lambda: _context(settings, fingerprint))


def _context_without_cache(error: settings_module.SettingsError) -> CacheContext:
    """A setting cannot be read: say which, once, and compile as ``NUMBA`` does meanwhile
    (a typo in a variable must not fail the compiles of a program that never asked for it)."""
    warn_once(("unusable setting", str(error)),
              f"numba_cache: {error}. Compiling without the cache until it is fixed.")
    settings = settings_module.override(settings_module.defaults(), disabled=True)
    fingerprint = Fingerprint.from_components({"unusable_setting": str(error)})
    return CacheContext(settings, NullStore(settings), fingerprint, enabled=False,
                        state=compile_state())


def compile_state() -> dict:
    """The PyTensor flags and numba settings of the fingerprint, as they are now: a
    notebook may set them in Python, and change them between building a function and
    calling it."""
    from pytensor import config

    return {"flags": {flag: getattr(config, flag) for flag in PYTENSOR_FLAGS},
            "numba": numba_settings()}


@contextlib.contextmanager
def flags_in_force(context: CacheContext) -> Iterator[None]:
    """`context`'s PyTensor flags and numba settings in force in the block.

    A function built inside ``config.change_flags(numba__fastmath=False)`` and called
    after it compiles what it did not load at its first call (an op kernel gone from
    the store, a hit verified): under the flags of its keys, as PyTensor's ``NUMBA``
    compiles under the flags of its build. Nothing changes when they are in force already.
    """
    from numba.core import config as numba_config
    from pytensor import config

    state = context.state
    changed_flags = {flag: value for flag, value in state.get("flags", {}).items()
                     if getattr(config, flag) != value}
    changed_numba = {name: value for name, value in state.get("numba", {}).items()
                     if getattr(numba_config, name) != value}
    if not changed_flags and not changed_numba:
        yield
        return
    saved = {name: getattr(numba_config, name) for name in changed_numba}
    try:
        for name, value in changed_numba.items():
            setattr(numba_config, name, value)
        with config.change_flags(**changed_flags):
            yield
    finally:
        for name, value in saved.items():
            setattr(numba_config, name, value)


def helper_state(settings: settings_module.Settings) -> dict:
    """What a helper process needs to compile as this process does (:func:`adopt_state`):
    `settings`, and the PyTensor flags and numba settings of the fingerprint."""
    return {"settings": settings, **compile_state()}


def adopt_state(state: dict, **overrides) -> CacheContext:
    """In a helper process: take the settings (with `overrides`), PyTensor flags and numba
    settings of `state`, made by :func:`helper_state` in the process it helps; the context
    they give."""
    from numba.core import config as numba_config
    from pytensor import config

    settings_module.adopt(replace(state["settings"], **overrides))
    for flag, value in state["flags"].items():
        setattr(config, flag, value)
    for name, value in state["numba"].items():
        setattr(numba_config, name, value)
    return current_context()


def _context(settings, fingerprint) -> CacheContext:
    # A disabled cache has a store of nothing, so that Store need not ask in every method.
    store = session.current().stores.get(
        settings, lambda: NullStore(settings) if settings.disabled else Store(settings))
    context = CacheContext(settings, store, fingerprint, enabled=False, state=compile_state())
    if settings.disabled:
        return context
    this_thread = session.current().this_thread
    making, this_thread.making_context = this_thread.making_context, True
    try:
        passed = _self_test_passed(context)
    finally:
        this_thread.making_context = making
    return replace(context, enabled=True) if passed else context


def _self_test_passed(context: CacheContext) -> bool:
    """Check every upstream seam (:mod:`numba_cache._compat`), a tiny kernel's round trip
    among them, once per fingerprint and store root.

    Success is remembered by recording the fingerprint's components beside its
    entries (which is also what lets ``numba-cache explain`` name a changed
    component), so warm processes pay one small read. The fingerprint holds every
    package version, so new upstream versions are checked again.

    A new store whose remote tier vouches for the fingerprint (:mod:`numba_cache.store.tier_notes`)
    runs only the checks that compile nothing: the others would compile the same
    probes with the same packages, CPU and settings as the process that vouched.
    So a fresh CI job on a warm tier compiles nothing at all (numba's runtime comes
    from the tier too, at the first lookup). The cheap checks run first, so a moved
    seam turns the cache off before anything is loaded, vouch or not.
    """
    store, fingerprint = context.store, context.fingerprint
    if store.fingerprint_components(fingerprint.digest) is not None:
        return True
    found = _compat.problems(_compat.all_seams())
    vouched = not found and store.vouched(fingerprint.digest)
    compiled_runtime = None
    if not found and not vouched:
        from numba.core.registry import cpu_target

        # Before the seams compile anything (numba would compile its runtime, unstored);
        # stored only once they are found in place.
        compiled_runtime = runtime.initialize(context, cpu_target.target_context, save=False)
        found = _compat.problems(probes.PROBES)
    if found:
        logs.warn(
            "numba_cache is turned off for this process: " + "; ".join(found)
            + ". Compiles still work, uncached. Is an installed package outside "
            "numba_cache's supported range?",
            StoreWarning,
            stacklevel=3,
        )
        return False
    store.record_fingerprint(fingerprint.digest, fingerprint.components)
    if not vouched:
        store.vouch(fingerprint.digest, fingerprint.components)
    if compiled_runtime is not None:
        runtime.store(context, compiled_runtime)
    return True
