"""What converting a graph told the user, recorded with its kernel and told again on a hit.

PyTensor's ``NUMBA`` mode converts every op while ``pytensor.function()`` builds
the function, and that is where it warns (``Numba will use object mode to run
<Op>'s perform method``: part of the graph will run at Python speed) or raises
(an op it cannot convert). numba_cache converts on a miss only, so it converts
at the same moment (see :func:`numba_cache.kernels.assembly.graph_kernel.graph_kernel`) and keeps
the warnings of that conversion with the graph's entry, as ccache keeps a
compiler's stderr: a hit tells them again, in order, at the same point.

Rewriting warns too (fusion stopping at the kernel argument limit): the rewrite
cache keeps what rewriting said with the rewritten graph, and a hit tells it again.

Warnings are recorded, then emitted again through :func:`warnings.warn_explicit`
with their category, message and origin, so the user's filters apply to them as
to the originals (``pytest.warns``, ``filterwarnings("error")``). Only warnings
about the graph are kept (:func:`about_the_graph`): a deprecation met by an import
that the first compile of a process made is told then, not by every later hit.
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def recording() -> Iterator[list[dict]]:
    """Collect the warnings raised inside, then emit them again for the user's filters."""
    recorded: list[dict] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield recorded
            finally:
                recorded.extend(_describe(warning) for warning in caught)
    finally:  # what was said before an error is said too, as without recording
        emit(recorded)


def filters_raise() -> bool:
    """Whether a warning filter in force turns some warning into an exception. Recording
    then would change what the code recorded does: a warning raised inside PyTensor's
    rewriters is caught there, and that rewrite skipped."""
    return any(entry[0] == "error" for entry in warnings.filters)


#: Categories of warnings about code, not the graph: told when they happen, never kept.
ABOUT_CODE = frozenset({"builtins:DeprecationWarning", "builtins:PendingDeprecationWarning",
                        "builtins:ImportWarning"})


def about_the_graph(recorded: list[dict]) -> list[dict]:
    """The recorded warnings to keep with an entry, to be told again on a hit."""
    return [warning for warning in recorded if warning["category"] not in ABOUT_CODE]


def emit(recorded: list[dict]) -> None:
    """Warn each recorded warning again, in order."""
    for warning in recorded:
        warnings.warn_explicit(warning["message"], _category(warning["category"]),
                               warning["filename"], warning["lineno"])


def _describe(warning: warnings.WarningMessage) -> dict:
    category = warning.category
    return {"category": f"{category.__module__}:{category.__qualname__}",
            "message": str(warning.message), "filename": warning.filename,
            "lineno": warning.lineno}


def _category(name: str) -> type[Warning]:
    """The warning class named ``module:qualname``; UserWarning if it cannot be found."""
    module, _, qualname = name.partition(":")
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return UserWarning
    return found if isinstance(found, type) and issubclass(found, Warning) else UserWarning
