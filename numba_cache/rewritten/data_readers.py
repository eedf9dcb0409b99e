"""The readers of data values that rewriting may use, and what decides their answers.

Each reader is named by its module-qualified function name (as
:mod:`.data_reads` sees it calling ``TensorConstant.data``) and registered with a
*summary*: a function of the data that determines everything the reader does
with it. Two graphs rewritten from data with the same summaries for every reader
that looked are the same graph. Readers that take a constant and return what
they found in it are summarized by PyTensor's own answer (:func:`asking`);
PyTensor's constant inferences (``pytensor.assumptions``) are found in its
registry. Register more with :func:`data_reader`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np

from numba_cache.keys.canonical import canonical

#: Readers of data values by module-qualified function name, each with the
#: summary of the values that decides everything the reader does with them.
DATA_READERS: dict[str, Callable[[np.ndarray], object]] = {}


def data_reader(name: str):
    """Register the decorated summary for the reader `name` (``module.qualname``)."""

    def register(summary):
        DATA_READERS[name] = summary
        return summary

    return register


def asking(function: Callable) -> Callable[[np.ndarray], object]:
    """The summary that is PyTensor's own answer: `function` of a constant holding the data.

    For readers that take a constant and return what they found in it, so the
    answer recorded is the one the reader gives, by construction.
    """

    def summary(data: np.ndarray):
        from pytensor.tensor import constant

        answer = function(constant(data))
        return answer.name if isinstance(answer, enum.Enum) else canonical(answer)

    return summary


@data_reader("pytensor.tensor.rewriting.subtensor.local_uint_constant_indices")
def _smallest_unsigned_dtype(data: np.ndarray):
    """The index dtype ``local_uint_constant_indices`` picks, or why it picks none."""
    if data.size == 0 or data.dtype == bool:
        return "unchanged"
    if data.min() < 0:
        return "negative"
    return np.min_scalar_type(data.max()).str


def _register_pytensor_readers() -> None:
    from pytensor.assumptions.core import CONSTANT_INFER_REGISTRY
    from pytensor.tensor.rewriting.subtensor import _constant_is_arange
    from pytensor.tensor.variable import TensorConstant

    for function in (_constant_is_arange, TensorConstant.unique_value.fget,
                     *CONSTANT_INFER_REGISTRY.values()):
        DATA_READERS.setdefault(f"{function.__module__}.{function.__qualname__}", asking(function))


def reader_summary(reader: str) -> Callable[[np.ndarray], object] | None:
    """The summary registered for `reader`, PyTensor's constant inferences included."""
    if reader not in DATA_READERS:
        _register_pytensor_readers()
    return DATA_READERS.get(reader)
