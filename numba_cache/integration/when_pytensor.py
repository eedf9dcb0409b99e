"""Run functions once PyTensor is imported: now if it is, else right after its import.

numba_cache registers its mode through PyTensor's API, which needs PyTensor (and
so numba) imported. Importing them costs a second or more, which a process that
only reads the store (the CLI) should never pay, and which a process that
compiles pays anyway. So the registration waits for PyTensor.

"Right after" means once ``pytensor`` has executed *and* no module of
numba_cache is half-way through its own import in this thread: a first import
of, say, ``numba_cache.keys.graph`` imports PyTensor, and a registration run at
that moment would import the half-made module again and fail. A meta path
finder, present only while functions wait, wraps the loading of ``pytensor``
and of numba_cache's modules to know when that moment comes.

It imports nothing but the standard library, :mod:`numba_cache.session` and
:mod:`numba_cache.logs` (which import nothing else of numba_cache's but the session):
importing it must stay cheap.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from numba_cache import logs, session


def when_pytensor_is_imported(function: Callable[[], None]) -> None:
    """Call `function` once PyTensor is imported (see the module docstring).

    A failure is a warning, never an error in the user's import.
    """
    if "pytensor" in sys.modules:
        _call(function)
        return
    session.current().waiting_for_pytensor.append(function)
    if not any(isinstance(finder, _WaitForPyTensor) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WaitForPyTensor())


def _call(function: Callable[[], None]) -> None:
    try:
        function()
    except Exception as error:
        logs.warn(f"numba_cache: {getattr(function, '__qualname__', function)} failed after "
                  f"PyTensor was imported: {error!r}; numba_cache is not in use", stacklevel=3)


def _watched(name: str) -> bool:
    return name == "pytensor" or name.startswith("numba_cache.")


class _WaitForPyTensor:
    """A meta path finder that finds nothing itself: it wraps the loaders others find."""

    def find_spec(self, name, path=None, target=None):
        if not _watched(name):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if hasattr(spec.loader, "exec_module"):
            spec.loader = _CallWhenDone(spec.loader)
        elif name == "pytensor":
            logs.warn(f"numba_cache: cannot wait for PyTensor's import (its loader is "
                      f"{spec.loader!r}); the NUMBA_CACHE mode is not registered: import "
                      "pytensor before numba_cache", stacklevel=2)
        return spec


class _CallWhenDone:
    """A loader that executes the module with the real loader, then calls the waiting
    functions if PyTensor is in and no watched module is still executing in this thread."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # create_module, get_source, ...: the real loader's
        return getattr(self._loader, name)

    def exec_module(self, module):
        this_thread = session.current().this_thread
        this_thread.imports_executing += 1
        try:
            self._loader.exec_module(module)
        finally:
            this_thread.imports_executing -= 1
        if this_thread.imports_executing == 0 and "pytensor" in sys.modules:
            _stop_waiting()


def _stop_waiting() -> None:
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _WaitForPyTensor)]
    waiting = session.current().waiting_for_pytensor
    while waiting:
        _call(waiting.pop(0))
