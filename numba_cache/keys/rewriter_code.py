"""The code of rewrites from outside PyTensor, for the rewrite key.

PyTensor's own rewrites are pinned by its version, in the fingerprint. A rewrite
a user, PyMC or another library registers is not: two scripts may register a
``local_my_sinh`` of the same name and class (``FromFunctionNodeRewriter``) with
other bodies, or a user may fix a rewrite's body between two runs. Such a rewrite
is described by the code it runs: the functions it holds (``fn``), the methods of
its class, the rewriters it wraps, and, transitively, the functions and classes of
their own module they name. Values they read from their module (a threshold
constant) are not: ``docs/limits.md`` says so.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import types

from pytensor.graph.rewriting.basic import (
    FromFunctionGraphRewriter,
    FromFunctionNodeRewriter,
    Rewriter,
    WalkingGraphRewriter,
)

from numba_cache.keys.canonical import qualified_name

#: Packages whose code the fingerprint pins (their versions are in it); with the
#: standard library (Python's version is).
PINNED = frozenset({"pytensor", "numpy", "scipy", "numba", "llvmlite", "builtins",
                    *sys.stdlib_module_names})


def describe_rewrite(rewrite) -> list:
    """`rewrite` by its class, and by the digest of the code it runs from outside
    PyTensor when it runs any."""
    code = foreign_code_digest(rewrite)
    return [qualified_name(type(rewrite)), code] if code else [qualified_name(type(rewrite))]


def foreign_code_digest(rewrite) -> str | None:
    """The digest of the code from outside PyTensor that `rewrite` runs, or None."""
    names = _CODE_ATTRIBUTES.get(type(rewrite))
    if names is not None and all(_pinned_leaf(getattr(rewrite, name, None)) for name in names):
        return None  # most of PyTensor's registry: a function of PyTensor's own
    found = _Code()
    found.add_object(rewrite)
    return found.digest()


#: Values that hold no code a rewrite runs: plain values, and the classes and ops
#: rewriters track (an op's code is its graph's, keyed there).
_CODELESS = frozenset({str, bytes, bool, int, float, complex, type(None), type, types.UnionType})


#: Where PyTensor's most common rewriter classes keep the code they run: only there
#: (what a node rewriter tracks is ops and patterns, not code). Any other rewriter is
#: searched through all its attributes.
_CODE_ATTRIBUTES = {
    FromFunctionNodeRewriter: ("fn",),
    FromFunctionGraphRewriter: ("fn", "requirements"),
    WalkingGraphRewriter: ("node_rewriter", "failure_callback"),
}


def _pinned(module: str | None) -> bool:
    return module is not None and module.partition(".")[0] in PINNED


class _Code:
    """Collects the code objects reachable from rewriter objects, outside PyTensor."""

    def __init__(self):
        self._seen: set[int] = set()
        self._parts: list[bytes] = []

    def digest(self) -> str | None:
        if not self._parts:
            return None
        return hashlib.sha256(b"\x00".join(self._parts)).hexdigest()

    def add_object(self, value, depth: int = 0) -> None:
        kind = type(value)
        if kind in _CODELESS or id(value) in self._seen or depth > 8:
            return
        self._seen.add(id(value))
        if kind is types.FunctionType:
            self.add_function(value)
        elif kind is types.MethodType:
            self.add_function(value.__func__)
        elif kind is list or kind is tuple:
            for member in value:
                self.add_object(member, depth + 1)
        elif isinstance(value, Rewriter):
            self.add_class(kind)
            names = _CODE_ATTRIBUTES.get(kind)
            members = (_attributes(value) if names is None
                       else [getattr(value, name, None) for name in names])
            for member in members:
                self.add_object(member, depth + 1)
        elif isinstance(value, list | tuple | set | frozenset):
            for member in value:
                self.add_object(member, depth + 1)
        elif isinstance(value, dict):
            for member in value.values():
                self.add_object(member, depth + 1)

    def add_class(self, cls: type) -> None:
        for klass in _foreign_classes(cls):
            if id(klass) in self._seen:
                continue
            self._seen.add(id(klass))
            self._parts.append(qualified_name(klass).encode())
            for member in vars(klass).values():
                function = getattr(member, "__func__", member)  # static and class methods
                if isinstance(function, types.FunctionType):
                    self.add_function(function)

    def add_function(self, function: types.FunctionType) -> None:
        if _pinned(function.__module__):
            return
        self._seen.add(id(function))
        self._parts.append(f"{function.__module__}.{function.__qualname__}".encode())
        self._add_code(function.__code__)
        self._parts.append(_stable_repr(function.__defaults__).encode())
        for cell in function.__closure__ or ():
            try:
                self.add_object(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        # What it names in its own module: helpers it calls, classes it builds.
        for name in names_read(function.__code__):
            value = function.__globals__.get(name)
            if (isinstance(value, types.FunctionType | type) and id(value) not in self._seen
                    and getattr(value, "__module__", None) == function.__module__):
                if isinstance(value, type):
                    self.add_class(value)
                else:
                    self.add_function(value)

    def _add_code(self, code: types.CodeType) -> None:
        self._parts.append(code.co_code)
        self._parts.append(repr(code.co_names).encode())
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                self._add_code(constant)
            else:
                self._parts.append(_stable_repr(constant).encode())


def _pinned_leaf(value) -> bool:
    return value is None or value == () or (
        type(value) is types.FunctionType and _pinned(value.__module__))


@functools.cache
def _foreign_classes(cls: type) -> tuple[type, ...]:
    """The classes of `cls`'s method resolution order whose code the fingerprint does not pin."""
    return tuple(klass for klass in cls.__mro__ if not _pinned(klass.__module__))


def _attributes(value) -> list:
    members = list(vars(value).values()) if hasattr(value, "__dict__") else []
    for cls in type(value).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if hasattr(value, slot):
                members.append(getattr(value, slot))
    return members


def names_read(code: types.CodeType) -> set[str]:
    """The names `code` and the code nested in it refer to (attributes included)."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= names_read(constant)
    return names


def _stable_repr(value) -> str:
    """`value`'s text, the same in every process: sets sorted (a frozenset constant's
    order follows the hash seed), objects other than plain values by their class."""
    if value is None or isinstance(value, bool | int | float | complex | str | bytes):
        return repr(value)
    if isinstance(value, tuple | list):
        return "(" + ",".join(_stable_repr(member) for member in value) + ")"
    if isinstance(value, set | frozenset):
        return "{" + ",".join(sorted(_stable_repr(member) for member in value)) + "}"
    return f"<{qualified_name(type(value))}>"
