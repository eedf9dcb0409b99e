"""Canonical, process-independent descriptions of the values a key is made of.

:func:`canonical` turns op properties, PyTensor types, constants and other values
into plain JSON data (lists, dicts, strings, ints, bools, ``None``) that depends
only on content: never on ``id``, ``repr`` truncation, pickle memo order, dict
insertion order, or ``PYTHONHASHSEED``. :func:`digest` hashes such data.

Extension is by registration, as in PyTensor's own dispatch: a type whose
description needs care registers a handler with ``@canonical.register(Type)``.
Values without a handler fall back to a hash of their pickle, tagged so, which
can only cause misses (pickles of equal objects may differ), never false hits.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import pickle
import types
from collections.abc import Callable, Mapping

import numpy as np


class UnkeyableValue(TypeError):
    """A value that cannot be described by content, so nothing made of it may be cached."""


def digest(data) -> str:
    """sha256 of canonical JSON data."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def qualified_name(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


class ByClass:
    """A function dispatched on its argument's class, as ``functools.singledispatch`` is,
    through the class's MRO alone.

    singledispatch resolves each class it has not seen against every registered class
    with ``issubclass``. PyTensor's classes are ABCs, whose check walks every subclass:
    about 10 ms of the GP model's warm compile of 0.26 s on a quiet machine (46 classes),
    several times that on a loaded one. Here a class resolves to the handler of the first
    class of its MRO that has one; a class registered with an ABC virtually (``dict``
    with ``Mapping``) is registered itself.
    """

    def __init__(self, default: Callable):
        self._handlers: dict[type, Callable] = {object: default}
        self._resolved: dict[type, Callable] = {}
        functools.update_wrapper(self, default)

    def register(self, cls: type) -> Callable[[Callable], Callable]:
        """Decorator: the decorated function describes instances of `cls`."""
        def add(handler: Callable) -> Callable:
            self._handlers[cls] = handler
            self._resolved.clear()
            return handler
        return add

    def dispatch(self, cls: type) -> Callable:
        """The handler of instances of `cls`."""
        handler = self._resolved.get(cls)
        if handler is None:
            handler = next(self._handlers[each] for each in cls.__mro__ if each in self._handlers)
            self._resolved[cls] = handler
        return handler

    def __call__(self, value):
        return self.dispatch(type(value))(value)


@ByClass
def canonical(value):
    """Describe `value` by content as JSON data (see the module docstring)."""
    if hasattr(value, "__props__"):
        return props_description(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return ["dataclass", qualified_name(type(value)), fields]
    try:
        payload = pickle.dumps(value, protocol=5)
    except Exception as exc:
        raise UnkeyableValue(
            f"cannot describe a {type(value).__qualname__} by content: {exc}"
        ) from exc
    return ["pickle", qualified_name(type(value)), hashlib.sha256(payload).hexdigest()]


def props_description(obj) -> list:
    """Describe an op or type by its class and ``__props__``."""
    props = {name: canonical(getattr(obj, name)) for name in obj.__props__}
    return ["props", qualified_name(type(obj)), props]


@canonical.register(type(None))
@canonical.register(bool)
@canonical.register(str)
def _(value):
    return value


@canonical.register(int)
def _(value):
    # JSON integers lose precision past 2**53 in some readers; a string does not.
    return ["int", str(value)]


@canonical.register(float)
def _(value):
    return ["float", float(value).hex()]


@canonical.register(complex)
def _(value):
    return ["complex", value.real.hex(), value.imag.hex()]


@canonical.register(bytes)
def _(value):
    return ["bytes", hashlib.sha256(value).hexdigest()]


@canonical.register(tuple)
@canonical.register(list)
def _(value):
    return [type(value).__name__, [canonical(item) for item in value]]


@canonical.register(frozenset)
@canonical.register(set)
def _(value):
    items = sorted((canonical(item) for item in value), key=digest)
    return ["set", items]


@canonical.register(Mapping)
@canonical.register(dict)
@canonical.register(types.MappingProxyType)
def _(value):
    items = sorted(([canonical(k), canonical(v)] for k, v in value.items()), key=digest)
    return ["dict", items]


@canonical.register(slice)
def _(value):
    return ["slice", canonical(value.start), canonical(value.stop), canonical(value.step)]


@canonical.register(type)
def _(value):
    return ["class", qualified_name(value)]


@canonical.register(np.dtype)
def _(value):
    return ["dtype", value.str if value.names is None else str(value.descr)]


@canonical.register(np.generic)
def _(value):
    return ["scalar", value.dtype.str, value.tobytes().hex()]


@canonical.register(np.ndarray)
def _(value):
    return ["array", *array_content(value)]


def array_content(value: np.ndarray) -> list:
    """dtype, shape and sha256 of the C-ordered bytes of an array."""
    if value.dtype.hasobject:
        content = canonical(value.tolist())
        return [value.dtype.str, list(value.shape), digest(content)]
    data = np.ascontiguousarray(value)
    return [value.dtype.str, list(value.shape), hashlib.sha256(data.data).hexdigest()]


@canonical.register(types.FunctionType)
def _(value):
    # Code identity, not just the name: a changed helper body changes the kernel.
    code = value.__code__
    closure = [canonical(cell.cell_contents) for cell in value.__closure__ or ()]
    return [
        "function",
        qualified_name(value),
        hashlib.sha256(code.co_code).hexdigest(),
        canonical([c for c in code.co_consts if not isinstance(c, types.CodeType)]),
        closure,
    ]


@canonical.register(types.BuiltinFunctionType)
def _(value):
    return ["builtin", f"{getattr(value, '__module__', None)}.{value.__qualname__}"]
