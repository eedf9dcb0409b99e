"""Where numba_cache reaches into numba's, PyTensor's and nutpie's machinery, and whether it still can.

numba_cache needs private upstream API: numba's compile results and code
libraries, PyTensor's modes and constant folding, nutpie's closures. Each use is
a :class:`Seam` registered here by the module of this package for its upstream
(:mod:`.numba_seams`, :mod:`.pytensor_seams`, :mod:`.nutpie_seams`), naming the
upstream versions it was written for and a check that looks at upstream as it is
installed: an attribute, a signature, a local variable, a behaviour.

:func:`problems` runs the checks. The self-test (:mod:`numba_cache.kernels.context`)
calls it once per environment fingerprint (which holds every package version)
and store for numba's and PyTensor's seams; nutpie's are checked when nutpie is in use.
The checks here look (an attribute, a method's source) and compile nothing. The
*probes*, seams whose check runs numba_cache's own code on a tiny kernel (marked
``compiles``), live beside that code in :mod:`numba_cache.kernels.probes`; where the
shared tier or an imported archive vouches that the checks passed for the very same
fingerprint, the probes are skipped and the seams here still run:
if a seam has moved, numba_cache turns itself off for the process with one
warning naming the seam, and compiles go on uncached: a seam that cannot see what
it needs must never guess. ``tests/test_compat.py`` runs every check, so the
suite fails loudly on an upstream that moved, and shows that a moved seam turns
the cache off.

The rest of numba_cache reads upstream internals through the plain functions of
:mod:`.numba_internals` and :mod:`.pytensor_internals` (``tests/test_architecture.py``
lists the modules that import numba's internals themselves, each with why). The global patches it
installs live here too, each in its own module, installed only while needed:
:mod:`.numba_unique_ids`, :mod:`.tensor_constant_data`, :mod:`.destroy_handler_cycles`,
:mod:`.sparse_import` (the last three counted in by :mod:`.counted_patch`). (Patches bound to the
logic around them, numba's object-mode compile, its unpickler of machine code's
constants and ``CFunc.__init__``, stay with
that logic in :mod:`numba_cache.kernels`; their seams are checked here.)
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import NamedTuple


class SeamMoved(RuntimeError):
    """An upstream seam is not what numba_cache was written against."""


class Seam(NamedTuple):
    """One use of private upstream API.

    `check` raises :class:`SeamMoved` (or any error) if upstream no longer looks
    as the seam needs; `written_for` holds the ``major.minor`` versions of
    `upstream` it was written and tested against; `used_by` names our module;
    `compiles` says whether the check compiles a kernel (see the module docstring).
    """

    name: str
    upstream: str
    written_for: tuple[str, ...]
    used_by: str
    check: Callable[[], None]
    compiles: bool = False


SEAMS: list[Seam] = []


def seam(name: str, upstream: str, written_for: tuple[str, ...], used_by: str,
         compiles: bool = False):
    """Decorator: register the decorated function as the check of a seam."""
    def register(check: Callable[[], None]) -> Callable[[], None]:
        SEAMS.append(Seam(name, upstream, written_for, used_by, check, compiles))
        return check
    return register


def require(condition: bool, what: str) -> None:
    if not condition:
        raise SeamMoved(what)


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_written_for(version: str | None, written_for: tuple[str, ...]) -> bool:
    return version is not None and version.startswith(tuple(f"{v}." for v in written_for))


def all_seams(with_nutpie: bool = False) -> list[Seam]:
    """numba's and PyTensor's seams; nutpie's too if asked (importing nutpie takes a second,
    so the recogniser checks them itself, when nutpie is in use)."""
    from numba_cache._compat import numba_seams, pytensor_seams  # noqa: F401 - registration

    if with_nutpie:
        from numba_cache._compat import nutpie_seams  # noqa: F401 - registration
    return [each for each in SEAMS if with_nutpie or each.upstream != "nutpie"]


def problems(seams: list[Seam] | None = None) -> list[str]:
    """What is wrong with each seam whose upstream is one of the versions it was written for.

    A seam of another upstream version is not judged by its version alone (a
    newer release may keep it): its check decides, the same way.
    """
    found = []
    for each in all_seams() if seams is None else seams:
        try:
            each.check()
        except Exception as exc:
            version = installed_version(each.upstream)
            found.append(f"{each.upstream} {version} moved {each.name} (used by {each.used_by}; "
                         f"written for {each.upstream} {', '.join(each.written_for)}): {exc}")
    return found
