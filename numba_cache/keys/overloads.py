"""The key of numba's implementation of a function, compiled for one signature under one set of flags.

numba implements the NumPy and Python functions a kernel calls (``np.take``,
``as_strided``, ``str(int)``) with ``@overload`` functions: each returns a Python
function for the argument types it is given, which numba compiles in a dispatcher
of its own (:mod:`numba_cache.kernels.protocol.overload_cache`). What numba
compiles from it is decided by:

- the function: its module, qualified name and code, the values its closure
  holds and its defaults (the ``@overload`` picks them from the argument types);
- the argument types;
- the flags of the compile: the dispatcher's options and what they inherit from
  the kernel calling it (fastmath, the error model, bounds checking);
- numba and the machine: the environment fingerprint (numba's version pins the
  code of the functions numba's own implementation calls, and its registries).

Only implementations defined in numba's own modules are keyed: their code and
what they call are numba's, which the fingerprint pins. A closure or default
value that cannot be described by content (:class:`.canonical.UnkeyableValue`)
makes the implementation unkeyable: numba compiles it as it always does.
"""

from __future__ import annotations

import hashlib
import types

from numba_cache import versions
from numba_cache.keys.canonical import UnkeyableValue, canonical, digest, qualified_name
from numba_cache.keys.key import Key

#: The packages whose implementations are keyed: their code is pinned by the fingerprint.
KEYED_PACKAGES = ("numba",)


def keyed(pyfunc) -> bool:
    """Whether `pyfunc`, an ``@overload``'s implementation, is one this module keys."""
    module = getattr(pyfunc, "__module__", None) or ""
    return module.partition(".")[0] in KEYED_PACKAGES and hasattr(pyfunc, "__code__")


def overload_key(pyfunc, args: tuple, flags: dict, locals_: dict, fingerprint) -> Key:
    """The key of `pyfunc` compiled for the numba types `args` with the compile `flags`
    (option name to value) and the dispatcher's `locals_`; raises
    :class:`.canonical.UnkeyableValue` if something cannot be described by content."""
    return Key.from_components(
        "overload",
        f"numba {pyfunc.__qualname__} {', '.join(map(str, args))}"[:120],
        {
            "fingerprint": fingerprint.digest,
            "codegen": versions.CODEGEN,
            "function": describe_function(pyfunc),
            "args": describe(tuple(args)),
            "flags": {option: describe_flag(value) for option, value in sorted(flags.items())},
            "locals": describe(locals_),
        },
    )


def describe(value):
    """`value` as JSON data, numba's types (in a closure, a signature) among them.

    A numba type is described by its class and its ``key``, which is what numba tells
    types apart by (``Type.__eq__``, and its interning of types); not by its pickle,
    which holds what numba caches on it as it compiles."""
    if _is_numba_type(value):
        return ["numba type", qualified_name(type(value)), _describe_type_key(value.key)]
    if isinstance(value, tuple | list):
        return [type(value).__name__, [describe(member) for member in value]]
    if isinstance(value, dict):
        return ["dict", sorted(([describe(k), describe(v)] for k, v in value.items()), key=str)]
    if isinstance(value, types.FunctionType):
        return describe_function(value)
    return canonical(value)


def _describe_type_key(key):
    """A numba type's ``key`` as JSON data: plain values, numba types, dtypes and classes
    of numba, NumPy and Python only. Another object (a function's typing template, a dispatcher) is
    named by its class alone where it is told apart by more: such a type is unkeyable."""
    if key is None or isinstance(key, bool | int | float | str):
        return canonical(key)
    if _is_numba_type(key):
        return describe(key)
    if isinstance(key, tuple | list):
        return [type(key).__name__, [_describe_type_key(member) for member in key]]
    if isinstance(key, type) and key.__module__.partition(".")[0] in _NAMED_CLASSES:
        return canonical(key)
    if type(key).__name__ == "dtype" and type(key).__module__.startswith("numpy"):
        return canonical(key)
    raise UnkeyableValue(f"a numba type's key holds a {type(key).__qualname__}")


def describe_function(function: types.FunctionType) -> list:
    """A Python function by its name, code, closure and defaults."""
    return [
        "function",
        qualified_name(function),
        _code_digest(function.__code__),
        [describe(cell.cell_contents) for cell in function.__closure__ or ()],
        describe(function.__defaults__),
        describe(function.__kwdefaults__),
    ]


def _code_digest(code: types.CodeType) -> str:
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_freevars).encode()]
    for constant in code.co_consts:
        parts.append(_code_digest(constant).encode() if isinstance(constant, types.CodeType)
                     else digest(canonical(constant)).encode())
    return hashlib.sha256(b"\x00".join(parts)).hexdigest()


def _is_numba_type(value) -> bool:
    return (not isinstance(value, type) and type(value).__module__.startswith(_NUMBA_TYPES)
            and hasattr(value, "key"))


_NUMBA_TYPES = "numba.core.types"
#: The packages whose classes a numba type's key may name: their names are unique.
_NAMED_CLASSES = ("numba", "numpy", "builtins")


def describe_flag(value):
    """A compile flag's value as JSON data: numba's option objects by their content."""
    if value is None or isinstance(value, bool | int | str):
        return canonical(value)
    members = getattr(value, "flags", None)  # FastMathOptions: a set of LLVM flag names
    if isinstance(members, set | frozenset):
        return [type(value).__qualname__, sorted(map(str, members))]
    text = repr(value)
    if " at 0x" in text:
        raise UnkeyableValue(f"compile flag {text} has no content-based description")
    return [type(value).__qualname__, text]
