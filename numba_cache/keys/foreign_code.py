"""The code from outside PyTensor that decides a graph's rewriting or an op's kernel, for keys.

PyTensor's own rewrites and numba conversions are pinned by its version, in the
fingerprint. Those a user, PyMC or another library registers are not: two scripts
may register a ``local_my_sinh`` of the same name and class
(``FromFunctionNodeRewriter``), or a ``MyOp`` conversion, with other bodies; a user
may fix one between two runs. These are described by the code they run: the
functions a rewrite holds, its class's methods, the rewriters it wraps
(:func:`describe_rewrite`); the conversion functions registered for an op and the
ops inside it (:func:`conversion_code_digest`); and, transitively, the functions and
classes of their own module they name. Values they read from their module (a
threshold constant) are not: ``docs/limits.md`` says so.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import types

from pytensor.graph.op import Op
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


#: PyTensor's numba conversion registries, by module and name: the code an op's kernel
#: is made by (its own, or a user's registration).
CONVERSION_REGISTRIES = (
    ("pytensor.link.numba.dispatch.basic", "numba_funcify"),
    ("pytensor.link.numba.dispatch.basic", "numba_funcify_and_cache_key"),
    ("pytensor.link.numba.dispatch.basic", "numba_funcify_default_op_cache_key"),
)


def conversion_code_digest(op) -> str | None:
    """The digest of the code from outside PyTensor that converts `op` (and the ops
    inside it: an Elemwise's scalar op, a Composite's) to numba, or None.

    PyTensor keys a user's op registered with ``register_funcify_default_op_cache_key``
    by its class name and props: two scripts' ``MyOp`` with other kernels, or a kernel
    fixed between two runs, would share a key. Only a process that imported PyTensor's
    numba dispatch can have registered a conversion: one that did not has PyTensor's own.
    """
    registries = [getattr(sys.modules[module], name) for module, name in CONVERSION_REGISTRIES
                  if module in sys.modules]
    if not registries:
        return None
    found = _Code()
    for op_type in _op_types(op, set()):
        for registry in registries:
            found.add_object(registry.dispatch(op_type))
    return found.digest()


def _op_types(op, seen: set) -> list[type]:
    """`op`'s class, and those of the ops in its props and inner graph, recursively."""
    if id(op) in seen:
        return []
    seen.add(id(op))
    types_found = [type(op)]
    inner = [getattr(op, name, None) for name in getattr(op, "__props__", ())]
    fgraph = getattr(op, "fgraph", None)
    if fgraph is not None and hasattr(fgraph, "apply_nodes"):
        inner += [node.op for node in fgraph.apply_nodes]
    for value in inner:
        if isinstance(value, Op):
            types_found += _op_types(value, seen)
    return types_found


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
    """Collects the code reachable from rewrites and conversion functions that the
    fingerprint does not pin."""

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
        self._seen.add(id(function))
        if _pinned(function.__module__):
            # A wrapper of PyTensor's (functools.wraps, a registration helper) may hold
            # a user's function.
            for cell in function.__closure__ or ():
                try:
                    self.add_object(cell.cell_contents)
                except ValueError:  # an empty cell
                    pass
            return
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
    """Nothing, or a function of a pinned package holding no other function."""
    return value is None or value == () or (
        type(value) is types.FunctionType and _pinned(value.__module__)
        and not value.__closure__)


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
