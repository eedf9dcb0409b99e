"""The startup hook: ``NBCACHE_ACTIVATE=1`` reaches processes that never import numba_cache.

``numba-cache startup install`` writes a ``.pth`` file into the environment's
``site-packages``; Python runs its one line at every interpreter start. When
``NBCACHE_ACTIVATE`` is true, that line runs :func:`install_hook` from this file
(by path, so that a process not asking for numba_cache imports nothing of it),
which imports numba_cache: a cheap import that waits for PyTensor, and right
after ``import pytensor`` completes, registers the mode and activates it. A
process that never imports PyTensor pays a look at one environment variable
and, if it is set, a few milliseconds; a pytest-xdist worker, a CI job or a
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


def install_hook() -> None:
    """Import numba_cache if ``NBCACHE_ACTIVATE`` asks for it: it activates once PyTensor is imported."""
    if not activation_wanted() or "numba_cache" in sys.modules:
        return
    try:
        import numba_cache  # noqa: F401 - cheap; it waits for PyTensor (integration/when_pytensor.py)
    except Exception as error:  # the hook never breaks the interpreter's start
        import warnings

        message = f"numba_cache is not activated: importing it failed: {error!r}"
        try:
            warnings.warn(message, stacklevel=2)
        except UserWarning:  # -W error: still not a broken start
            print(message, file=sys.stderr)


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
