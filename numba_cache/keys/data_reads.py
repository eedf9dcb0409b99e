"""What rewriting learned from observed data, so that new data can skip rewriting.

Observed data enters graphs as large constants (see :mod:`.constants`). Rewriting
asks a few questions of their values: is this index array non-negative and how
small a dtype holds it, is it an ``arange``, are all its elements equal. A
rewritten graph is valid for new data of the same type and shape exactly when
every question asked gets the same answer from the new data.

:class:`DataReads` watches every read of a data constant's values while PyTensor
rewrites. A read by a reader in :data:`DATA_READERS` is recorded as a question
with its answer (the reader's *summary* of the values); a read by any other code,
or a merge of a data constant with an equal constant, makes the rewrite
*data-bound*: the rewritten graph is then cached by content only. Constants
that rewrites derive from data by a lossless cast (index arrays downcast to
``uint8``) count as that data, so reads of them are watched too.

Reads are seen through a property installed on ``TensorConstant.data``: every
way to a constant's values goes through that attribute. Outside a watched
rewrite it only returns the value.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from numba_cache.keys.canonical import canonical
from numba_cache.keys.constants import HIDDEN_MIN_SIZE, hidden_constants

#: Readers of data values by module-qualified function name, each with the
#: summary of the values that decides everything the reader does with them.
DATA_READERS: dict[str, Callable[[np.ndarray], object]] = {}

#: The reader behind PyTensor's merging of equal constants, checked apart.
MERGE_SIGNATURE = "pytensor.tensor.variable.TensorConstant.signature"


def data_reader(name: str):
    """Register the decorated summary for the reader `name` (``module.qualname``)."""

    def register(summary):
        DATA_READERS[name] = summary
        return summary

    return register


@data_reader("pytensor.tensor.rewriting.subtensor.local_uint_constant_indices")
def _smallest_unsigned_dtype(data: np.ndarray):
    """The index dtype ``local_uint_constant_indices`` picks, or why it picks none."""
    if data.size == 0 or data.dtype == bool:
        return "unchanged"
    if data.min() < 0:
        return "negative"
    return np.min_scalar_type(data.max()).str


@data_reader("pytensor.tensor.rewriting.subtensor._constant_is_arange")
def _arange_parameters(data: np.ndarray):
    """``(length, offset, step)`` when the data is an arange, as PyTensor matches it."""
    if data.ndim != 1 or data.size == 0 or data.dtype.kind not in "iu":
        return None
    if data.size == 1:
        return [1, int(data[0]), 1]
    diffs = np.diff(data)
    step = int(diffs[0])
    if step != 0 and np.all(diffs == step):
        return [int(data.size), int(data[0]), step]
    return None


@data_reader("pytensor.tensor.variable.TensorConstant.unique_value")
def _unique_value(data: np.ndarray):
    flat = data.ravel()
    if flat.size and (flat == flat[0]).all():
        return canonical(flat[0])
    return None


@dataclass(frozen=True)
class Origin:
    """A constant holds the data constant at `position` (see below), cast to `dtype`.

    Positions are those of :func:`.constants.hidden_constants` on the graph
    before rewriting.
    """

    position: int
    dtype: str


@dataclass
class DataReads:
    """The questions rewriting asked of the data constants of one graph, and answers.

    `answers` maps ``(origin, reader)`` to the summary; `bound_by` lists why the
    rewrite is data-bound (empty when it is not).
    """

    originals: list
    answers: dict = field(default_factory=dict)
    bound_by: list = field(default_factory=list)
    _origins: dict = field(default_factory=dict, repr=False)
    _signed: list = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, fgraph) -> DataReads:
        return cls(hidden_constants(fgraph))

    def origin(self, constant) -> Origin | None:
        """Where `constant`'s values come from: a data constant, or none (structure).

        Raises :class:`AmbiguousOrigin` when it could hold more than one.
        """
        key = id(constant)
        if key not in self._origins:
            self._origins[key] = (constant, self._find_origin(constant))
        found = self._origins[key][1]
        if isinstance(found, AmbiguousOrigin):
            raise found
        return found

    def _find_origin(self, constant):
        data = _raw(constant)
        for position, original in enumerate(self.originals):
            if original is constant:
                return Origin(position, data.dtype.str)
        matches = [Origin(position, data.dtype.str)
                   for position, original in enumerate(self.originals)
                   if _is_lossless_cast(_raw(original), data)]
        if len(matches) > 1:
            return AmbiguousOrigin(f"a constant equal to data constants {[m.position for m in matches]}")
        return matches[0] if matches else None

    def read(self, constant, reader: str) -> None:
        try:
            origin = self.origin(constant)
        except AmbiguousOrigin as exc:
            self.bound_by.append(f"{reader} read {exc}")
            return
        if reader == MERGE_SIGNATURE:
            self._check_merge(constant, origin)
            return
        if origin is None:
            return
        summary = DATA_READERS.get(reader)
        if summary is None:
            self.bound_by.append(f"{reader} read data constant {origin.position}")
            return
        self.answers[(origin, reader)] = summary(_raw(constant))

    def _check_merge(self, constant, origin) -> None:
        data = _raw(constant)
        for other, other_origin in self._signed:
            if other is constant or origin == other_origin:
                continue  # one object, two structural constants, or two copies of one datum
            if other.type == constant.type and np.array_equal(_raw(other), data):
                self.bound_by.append("a data constant equals another constant (merged)")
        if not any(other is constant for other, _ in self._signed):
            self._signed.append((constant, origin))

    def recipe(self, rewritten) -> list:
        """Where each hidden constant of the rewritten graph comes from.

        One :class:`Origin` per hidden constant of `rewritten`, in its canonical
        order, or None for a constant made by rewriting alone. Marks the
        rewrite data-bound when one is ambiguous.
        """
        recipe = []
        for constant in hidden_constants(rewritten):
            try:
                recipe.append(self.origin(constant))
            except AmbiguousOrigin as exc:
                self.bound_by.append(f"the rewritten graph holds {exc}")
                recipe.append(None)
        return recipe

    def questions(self) -> list:
        """The recorded questions in a canonical order: ``[position, dtype, reader]``."""
        return sorted([origin.position, origin.dtype, reader] for origin, reader in self.answers)

    def answer_list(self) -> list:
        return [self.answers[(Origin(position, dtype), reader)]
                for position, dtype, reader in self.questions()]


class AmbiguousOrigin(Exception):
    """A constant's values match more than one data constant."""


def answers_for(originals: list, questions: list) -> list | None:
    """The answers the data of `originals` gives to `questions`, or None if it cannot.

    None when a cast the rewritten graph relies on would lose values.
    """
    answers = []
    for position, dtype, reader in questions:
        data = cast_data(originals[position], dtype)
        if data is None:
            return None
        answers.append(DATA_READERS[reader](data))
    return answers


def cast_data(original, dtype: str) -> np.ndarray | None:
    """The values of `original` as `dtype`, or None when the cast would lose values."""
    data = _raw(original)
    if data.dtype.str == dtype:
        return data
    cast = data.astype(dtype)
    return cast if np.array_equal(cast.astype(data.dtype), data) else None


def _is_lossless_cast(source: np.ndarray, data: np.ndarray) -> bool:
    if not isinstance(data, np.ndarray) or source.shape != data.shape:
        return False
    if source.dtype == data.dtype:
        return np.array_equal(source, data)
    cast = source.astype(data.dtype)
    return np.array_equal(cast, data) and np.array_equal(cast.astype(source.dtype), source)


def _raw(constant):
    return constant.__dict__["data"]


_watching: contextvars.ContextVar[DataReads | None] = contextvars.ContextVar(
    "numba_cache_data_reads", default=None)


class watch:
    """Context manager: record reads of data constants into `reads` meanwhile."""

    def __init__(self, reads: DataReads):
        self._reads = reads

    def __enter__(self) -> DataReads:
        _install_property()
        self._token = _watching.set(self._reads)
        return self._reads

    def __exit__(self, *exc_info) -> None:
        _watching.reset(self._token)


def _get_data(constant):
    data = constant.__dict__["data"]
    reads = _watching.get()
    if reads is not None and isinstance(data, np.ndarray) and data.size >= HIDDEN_MIN_SIZE:
        caller = sys._getframe(1)
        reads.read(constant, f"{caller.f_globals.get('__name__')}.{caller.f_code.co_qualname}")
    return data


def _set_data(constant, value) -> None:
    constant.__dict__["data"] = value


def _install_property() -> None:
    from pytensor.tensor.variable import TensorConstant

    if not isinstance(TensorConstant.__dict__.get("data"), property):
        TensorConstant.data = property(_get_data, _set_data)
