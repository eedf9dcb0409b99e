"""nutpie's ``numba.cfunc`` wrappers, recognised so that they can be stored (:mod:`..kernels.cfunc`).

nutpie (``nutpie.compile_pymc``) compiles a PyMC model's logp-and-gradient and
its expansion as PyTensor functions, then wraps each ``vm.jit_fn`` in a
``numba.cfunc`` built from a closure. Everything that decides the wrapper's code
is nutpie's source (the module, hashed into the key), the closure's values and
the options numba is given (which :mod:`..kernels.cfunc` adds). A wrapper is
recognised only if every value is one of the kinds listed below; anything else,
another nutpie version, or a function around something other than a numba_cache
entry point, compiles exactly as numba compiles it.

Models with shared variables (``pm.Data``) are recognised too; nutpie gives
their record fields fresh names in every process, so those are keyed by
position (:func:`_shared_variables`).

The nutpie seams (the module name, and the qualified names and free variables
of ``logp_numba``, ``expand_numba``, ``extract_shared``, ``tuple_setitem_literal``
and the overload of ``extract_array``) are named and checked in
:mod:`numba_cache._compat.nutpie_seams`; the overload is found in numba's typing
registry (:mod:`numba_cache._compat.numba_seams`).
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from pathlib import Path

import numpy as np

from numba_cache._compat import numba_internals
from numba_cache._compat.nutpie_seams import (
    EXTRACT,
    EXTRACT_ARRAY,
    EXTRACT_SHARED,
    IMPL_EXTRACT_ARRAY,
    MODULE,
    SETITEM,
    SUPPORTED_VERSIONS,
    WRAPPERS,
)

_UUID_HEX = re.compile(r"[0-9a-f]{32}")


def recognize(pyfunc):
    """``(summary, key components, [entry point])`` for a wrapper of nutpie's, else None."""
    if getattr(pyfunc, "__module__", None) != MODULE:
        return None
    source = _module_source_digest()
    if source is None or not _seams_hold():
        return None
    code = getattr(pyfunc, "__code__", None)
    free = WRAPPERS.get(getattr(pyfunc, "__qualname__", None))
    if code is None or code.co_freevars != free:
        return None
    values = _closure(pyfunc)
    numbers = {name: values[name] for name in free if name.startswith("n_")}
    if not all(isinstance(value, int | np.integer) and not isinstance(value, bool)
               for value in numbers.values()):
        return None
    if values["numba"] is not sys.modules["numba"]:
        return None
    extraction = _extraction(values["extract"])
    if extraction is None:
        return None
    entry, shared = extraction
    components = {
        "nutpie": source,
        "function": pyfunc.__qualname__,
        **{name: str(int(value)) for name, value in numbers.items()},
        # The linked build's build, if it serves (numba_cache/kernels/helpers/linked_build.py): the
        # callbacks call it by its symbol, which is not the graph kernel's own.
        "kernel": numba_internals.dispatcher_cache(entry.kernel).served_key.digest,
        "hidden": list(entry.hidden_symbols()),
        **shared,
    }
    summary = f"nutpie {pyfunc.__name__} ({', '.join(f'{k}={v}' for k, v in numbers.items())})"
    return summary, components, [entry]


def _extraction(extract):
    """The entry point nutpie's ``extract_shared`` calls and the components describing the rest
    of it (its shared variables), if all of it is known; else None."""
    from numba.core.dispatcher import Dispatcher

    from numba_cache.kernels.callbacks.entry_point import is_entry_point

    if not isinstance(extract, Dispatcher):
        return None
    function = extract.py_func
    if (function.__module__, function.__qualname__) != (MODULE, EXTRACT):
        return None
    values = _closure(function)
    if function.__code__.co_freevars == ("inner",):
        shared = {}
    elif function.__code__.co_freevars == EXTRACT_SHARED:
        shared = _shared_variables(values)
        if shared is None:
            return None
    else:
        return None
    entry = values["inner"]
    if not is_entry_point(entry) or numba_internals.dispatcher_cache(entry.kernel).verdict is not None:
        return None  # a kernel known not to be stored: its wrapper could never be loaded
    return entry, shared


def _shared_variables(values: dict) -> dict | None:
    """Components for the shared variables an ``extract_shared`` reads from nutpie's record.

    Their values are frozen into the code (``shared_tuple``), so they are keyed by
    content. The record's field names are ``uuid4().hex``, new in every process:
    they are keyed by their position in the record, and the variables by the
    position of the field each one reads, which nutpie keeps in the closure of
    the overload of ``extract_array`` (``shared_metadata``).
    """
    import numba
    from numba.core.extending import _Intrinsic

    from numba_cache.keys.canonical import array_content

    metadata = _extract_array_metadata(values["extract_array"])
    record, arrays, indices = values["record_dtype"], values["shared_tuple"], values["indices"]
    setitem = values["tuple_setitem_literal"]
    if (metadata is None or values["numba"] is not numba
            or values["literal_unroll"] is not numba.literal_unroll
            or not isinstance(setitem, _Intrinsic)
            or (setitem._defn.__module__, setitem._defn.__qualname__) != (MODULE, SETITEM)
            or not isinstance(record, np.dtype) or record.names != ("shared",)
            or record["shared"].names != ("data", "size", "shape")
            or not isinstance(arrays, tuple) or indices != tuple(range(len(arrays)))
            or len(metadata) != len(arrays)):
        return None
    fields = record["shared"]["data"].names or ()
    if (not all(_UUID_HEX.fullmatch(name) for name in fields)
            or any(record["shared"][part].names != fields for part in ("size", "shape"))):
        return None
    layout = str(record.descr)
    for position, name in enumerate(fields):
        layout = layout.replace(name, f"field{position}")
    variables = []
    for array, item in zip(arrays, metadata, strict=True):
        if not (isinstance(array, np.ndarray) and isinstance(item, list) and len(item) == 4):
            return None
        name, ndim, shape, dtype = item
        if name not in fields or (ndim, shape, dtype) != (array.ndim, array.shape, array.dtype):
            return None
        variables.append([fields.index(name), *array_content(array)])
    return {"record": layout, "shared": variables}


def _extract_array_metadata(extract_array):
    """``shared_metadata`` of nutpie's overload of `extract_array`, if that is what it is."""
    import numba
    from numba.core.typing.templates import builtin_registry
    from numba.cpython.unsafe.tuple import tuple_setitem

    if (getattr(extract_array, "__module__", None), getattr(extract_array, "__qualname__", None)) != (
            MODULE, EXTRACT_ARRAY):
        return None
    found = [typ for value, typ in reversed(builtin_registry.globals) if value is extract_array]
    if len(found) != 1 or len(getattr(found[0], "templates", ())) != 1:
        return None
    overload = getattr(found[0].templates[0], "_overload_func", None)
    if (getattr(overload, "__qualname__", None) != IMPL_EXTRACT_ARRAY
            or overload.__code__.co_freevars != ("numba", "shared_metadata", "tuple_setitem")):
        return None
    values = _closure(overload)
    if values["numba"] is not numba or values["tuple_setitem"] is not tuple_setitem:
        return None
    metadata = values["shared_metadata"]
    return metadata if isinstance(metadata, tuple) else None


def _closure(function) -> dict:
    return {name: cell.cell_contents
            for name, cell in zip(function.__code__.co_freevars, function.__closure__, strict=True)}


@functools.cache
def _seams_hold() -> bool:
    """nutpie's seams checked once per process; if one moved, nothing is recognised."""
    from numba_cache._compat import all_seams, problems
    from numba_cache.logs import logger

    found = problems([each for each in all_seams(with_nutpie=True) if each.upstream == "nutpie"])
    for problem in found:
        logger.warning("numba_cache does not store nutpie's wrappers: %s", problem)
    return not found


@functools.cache
def _module_source_digest() -> str | None:
    """nutpie's version and the sha256 of its ``compile_pymc`` source, if it is a supported version."""
    module = sys.modules.get(MODULE)
    version = getattr(sys.modules.get("nutpie"), "__version__", "")
    if module is None or not version.startswith(tuple(v + "." for v in SUPPORTED_VERSIONS)):
        return None
    try:
        source = Path(module.__file__).read_bytes()
    except (OSError, TypeError):
        return None
    return f"{version}:{hashlib.sha256(source).hexdigest()}"
