"""One switch: every numba compile of PyTensor in this process goes through numba_cache.

:func:`activate` points PyTensor's numba names at numba_cache: the ``"numba"``
linker, the ``NUMBA`` mode (what code hard-coding ``mode="NUMBA"``, nutpie among
it, asks for), the mode ``FAST_RUN`` and the default mode resolve to when their
linker is numba, and the runtime modes PyTensor built before. Modes rebuilt from
their linker, as PyMC does (``Mode(linker=mode.linker, optimizer=...)``), keep the
rewrite level whether or not numba_cache is activated
(:func:`numba_cache.integration.linker.install_function_maker`).

:func:`deactivate` puts back every object it replaced. These are the PyTensor
seams, all in :mod:`pytensor.compile.mode`, and all of them here:

- ``predefined_linkers["numba"]``, ``predefined_modes["NUMBA"]``, the module
  global ``NUMBA`` (returned by ``get_mode("FAST_RUN")``), and
  ``fast_run_linkers_to_mode["numba"]``;
- ``_CACHED_RUNTIME_MODES``: modes built for ``"Mode"`` (the default) and
  friends, holding the linker they were built with, are rebuilt after a switch.

``tests/test_activation.py`` fails loudly if PyTensor moves any of them.

Setting ``NBCACHE_ACTIVATE=1`` activates it once numba_cache and PyTensor are both
imported (:mod:`.when_pytensor`): that reaches processes nobody starts by hand but
that import numba_cache, such as sampler workers under spawn or forkserver, which
import it when they unpickle a function compiled through it.
"""

from __future__ import annotations

import contextlib

from pytensor.compile import mode as mode_module

from numba_cache import cpu_target, logs, session, settings
from numba_cache.integration.linker import numba_cache_mode

#: The names activation replaces: (mapping or module, name), in this order.
_SEAMS = (
    (mode_module.predefined_linkers, "numba"),
    (mode_module.predefined_modes, "NUMBA"),
    (mode_module.fast_run_linkers_to_mode, "numba"),
    (vars(mode_module), "NUMBA"),
)


def is_active() -> bool:
    return session.current().activation_originals is not None


def activate_if_asked() -> None:
    """Activate if ``NBCACHE_ACTIVATE`` says so (numba_cache's import calls this).

    Only that setting is read: another bad setting is reported where it is used.
    A value that is not a boolean is warned about, never raised: an import must not fail.
    """
    try:
        wanted = settings.read("activate")
    except settings.SettingsError as error:
        logs.warn(f"numba_cache is not activated: {error}", stacklevel=3)
        return
    if wanted:
        activate()


def activate() -> None:
    """Route PyTensor's numba linker and modes through numba_cache (idempotent)."""
    state = session.current()
    if state.activation_originals is not None:
        return
    with contextlib.suppress(settings.SettingsError):  # reported where the fingerprint reads it
        # As early as can be: numba fixes its CPU when it first compiles, anyone's code.
        cpu_target.apply(settings.read("target"))
    mode = numba_cache_mode()
    replacements = (mode.linker, mode, mode, mode)
    state.activation_originals = [namespace[name] for namespace, name in _SEAMS]
    for (namespace, name), replacement in zip(_SEAMS, replacements, strict=True):
        namespace[name] = replacement
    mode_module._CACHED_RUNTIME_MODES.clear()


def deactivate() -> None:
    """Give PyTensor back the linker and modes :func:`activate` replaced (idempotent)."""
    state = session.current()
    if state.activation_originals is None:
        return
    for (namespace, name), original in zip(_SEAMS, state.activation_originals, strict=True):
        namespace[name] = original
    state.activation_originals = None
    mode_module._CACHED_RUNTIME_MODES.clear()
