"""Compile generated source into functions whose closure values are module globals.

Generated functions reference their helpers (op implementations, kernels,
constants) as *globals* of a private namespace, never as closure cells. numba
then sees stable bytecode for stable source, and the namespace can be filled
lazily: on a cache hit the globals of a graph function are never needed, so
nothing is converted; on a miss they are filled right before numba compiles.

The source is registered with :mod:`linecache` under the path it has (or will
have) in the store, so tracebacks and ``inspect.getsource`` show it without any
temporary file.
"""

from __future__ import annotations

import builtins
import linecache
from types import FunctionType

from numba_cache.codegen import generated


def register_source(source: str, filename: str) -> None:
    """Make `source` readable by linecache/inspect under `filename`.

    An entry with no modification time is never invalidated by
    ``linecache.checkcache``, so this works whether or not the file exists.
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def compile_function(
    source: str, function_name: str, filename: str, hoisted: dict | None = None
) -> FunctionType:
    """Compile `source` and return its function `function_name`.

    `hoisted` values become module-level globals of the generated function; more
    can be added later through ``function.__globals__``.
    """
    register_source(source, filename)
    namespace = {"__name__": generated.__name__, "__builtins__": builtins, **(hoisted or {})}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[function_name]
