"""A property on ``TensorConstant.data``, installed only while a rewrite is watched.

:mod:`numba_cache.rewritten.data_reads` sees every read of a data constant's values
while PyTensor rewrites. Every way to a constant's values goes through the
instance attribute ``data`` (set in ``Constant.__init__``), so a property of the
same name on the class sees them all; it stores the value where the plain
attribute lives (the instance ``__dict__``), so installing and removing it
changes nothing for constants made before, during or after.

The property is in place only while a rewrite is watched (:mod:`.counted_patch`), so
that outside one PyTensor runs exactly as without numba_cache.

PyTensor also keeps facts it derived from a constant's values on the constant
(:data:`CACHED_FACTS`: ``unique_value``, whether an index array is an ``arange``
or has no duplicates, whether a matrix is diagonal...), and reads them there
afterwards without reading the values. A watch sets them aside while it lasts
(:func:`facts_set_aside`), so that a rewrite that needs one computes it again from
the values, where the watch sees it; an attribute beyond those and a fresh
constant's (:func:`unknown_facts`) may be such a fact too, unseen.
"""

from __future__ import annotations

from collections.abc import Callable

from numba_cache import session
from numba_cache._compat import require, seam


def reads_seen_by(getter: Callable):
    """Route reads of ``TensorConstant.data`` through ``getter(constant, value)`` meanwhile
    (a context manager)."""
    from pytensor.tensor.variable import TensorConstant

    def install() -> None:
        TensorConstant.data = property(lambda constant: getter(constant, _value(constant)),
                                       _set_value)

    def remove(_) -> None:
        del TensorConstant.data

    return session.current().tensor_constant_patch.applied(install, remove)


#: What a fresh TensorConstant holds (instance attributes, then its tag's): not facts.
FRESH_ATTRIBUTES = frozenset({"type", "data", "name", "tag", "auto_name"})
FRESH_TAG_ATTRIBUTES = frozenset({"trace"})

#: Facts PyTensor derives from a constant's values and caches on it: instance
#: attributes, then attributes of its tag (``TensorConstant.unique_value``;
#: ``tensor/rewriting/subtensor.py``; the inferences of ``pytensor.assumptions``).
CACHED_FACTS = frozenset({"_unique_value"})
CACHED_TAG_FACTS = frozenset({"unique_indices", "jointly_unique_indices", "is_arange",
                              "is_diagonal", "is_tridiagonal", "is_permutation",
                              "is_selection"})


def facts_set_aside(constant) -> tuple[dict, dict]:
    """Remove the :data:`CACHED_FACTS` `constant` holds; they are returned, for
    :func:`put_facts_back`."""
    instance, tag = vars(constant), vars(constant.tag)
    return ({name: instance.pop(name) for name in CACHED_FACTS & instance.keys()},
            {name: tag.pop(name) for name in CACHED_TAG_FACTS & tag.keys()})


def put_facts_back(constant, facts: tuple[dict, dict]) -> None:
    """Put back the facts :func:`facts_set_aside` removed (those recomputed meanwhile are
    of the same values, and give way)."""
    instance, tag = facts
    vars(constant).update(instance)
    vars(constant.tag).update(tag)


def unknown_facts(constant) -> list[str]:
    """The attributes of `constant` and its tag that neither a fresh constant nor the
    known facts account for: facts PyTensor may have cached that no watch would see read."""
    return sorted({*(vars(constant).keys() - FRESH_ATTRIBUTES - CACHED_FACTS),
                   *(f"tag.{name}" for name in
                     vars(constant.tag).keys() - FRESH_TAG_ATTRIBUTES - CACHED_TAG_FACTS)})


def _value(constant):
    try:
        return constant.__dict__["data"]
    except KeyError:  # not set yet: as a plain attribute would be
        raise AttributeError("data") from None


def _set_value(constant, value) -> None:
    constant.__dict__["data"] = value


@seam("TensorConstant.data", "pytensor", ("3.3",), "rewritten/data_reads.py")
def check() -> None:
    import numpy as np
    from pytensor.graph.basic import Constant
    from pytensor.tensor.type import dvector
    from pytensor.tensor.variable import TensorConstant

    require(all("data" not in vars(cls) for cls in TensorConstant.__mro__),
            "a class of TensorConstant defines 'data' itself")
    require("data" not in getattr(Constant, "__slots__", ()), "Constant keeps 'data' in a slot")
    constant = TensorConstant(dvector, np.zeros(2))
    require("data" in vars(constant), "a TensorConstant no longer keeps its value in 'data'")
    require(not unknown_facts(constant),
            f"a fresh TensorConstant holds attributes not known: {unknown_facts(constant)}")
