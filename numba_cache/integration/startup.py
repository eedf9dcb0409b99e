"""The startup hook: ``NBCACHE_ACTIVATE=1`` reaches processes that never import numba_cache.

``numba-cache startup install`` writes a ``.pth`` file into the environment's
``site-packages``; Python runs its one line at every interpreter start. When
``NBCACHE_ACTIVATE`` is true, that line runs :func:`install_hook` from this file
(by path: importing the package would import PyTensor in every process), which
waits for PyTensor: right after ``import pytensor`` completes, it imports
numba_cache, whose import activates it. A process that never imports PyTensor
pays a look at one environment variable; a pytest-xdist worker, a CI job or a
sampler worker that compiles PyTensor graphs compiles them through the cache.

This file must import nothing but the standard library.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "numba_cache-startup.pth"
TRUE_WORDS = ("1", "true", "yes", "on")


def activation_wanted() -> bool:
    """True if ``NBCACHE_ACTIVATE`` says so (the full parser, with errors, is in settings)."""
    return os.environ.get("NBCACHE_ACTIVATE", "").strip().lower() in TRUE_WORDS


class _ActivateAfterPyTensor:
    """A meta path finder that lets ``pytensor`` import, then imports numba_cache."""

    def find_spec(self, name, path=None, target=None):
        if name != "pytensor":
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader.exec_module = _then_activate(spec.loader.exec_module)
        return spec


def _then_activate(exec_module):
    def exec_then_activate(module):
        exec_module(module)
        try:
            import numba_cache  # noqa: F401 - its import activates it (NBCACHE_ACTIVATE)
        except Exception as error:  # the hook never breaks the user's import of PyTensor
            import warnings

            warnings.warn(f"numba_cache is not activated: importing it failed: {error!r}",
                          stacklevel=2)

    return exec_then_activate


def install_hook() -> None:
    """Activate numba_cache once PyTensor is imported, if ``NBCACHE_ACTIVATE`` asks for it."""
    if not activation_wanted() or "numba_cache" in sys.modules:
        return
    if "pytensor" in sys.modules:
        import numba_cache  # noqa: F401
        return
    sys.meta_path.insert(0, _ActivateAfterPyTensor())


# Installing the .pth file (numba-cache startup)


def site_packages() -> Path:
    """The ``site-packages`` of the running environment (where pip installs packages)."""
    return Path(sysconfig.get_paths()["purelib"])


def pth_line() -> str:
    """The line Python runs at start: this file's :func:`install_hook`, if the file still exists."""
    here = str(Path(__file__).resolve())
    return (f"import os; p = {here!r}; os.path.exists(p) and "
            f"exec(compile(open(p).read() + '\\ninstall_hook()', p, 'exec'), "
            f"{{'__name__': 'numba_cache_startup'}})\n")


def install(directory: Path | None = None) -> Path:
    """Write the ``.pth`` file into `directory` (default: :func:`site_packages`); its path."""
    path = (directory or site_packages()) / PTH_NAME
    temporary = path.with_suffix(".tmp")
    temporary.write_text(pth_line())
    temporary.replace(path)
    return path


def remove(directory: Path | None = None) -> Path | None:
    """Delete the ``.pth`` file; its path, or None if there was none."""
    path = (directory or site_packages()) / PTH_NAME
    if not path.exists():
        return None
    path.unlink()
    return path


def installed(directory: Path | None = None) -> Path | None:
    path = (directory or site_packages()) / PTH_NAME
    return path if path.exists() else None
