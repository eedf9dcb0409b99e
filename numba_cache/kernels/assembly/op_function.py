"""The Python function an op kernel compiles: PyTensor's implementation itself where it can be.

numba compiles a callee in a library of its own (optimised, then made into machine
code), links that into the caller's module, and optimises and makes machine code of
the whole again. An op kernel that is a generated wrapper,
``def Op_<key>(i0, i1): return impl(i0, i1)``, therefore paid LLVM twice for PyTensor's
implementation, and numba's pipeline once more for the wrapper: about 0.03 s a
kernel, 0.4-0.5 s of the 2.6 s numba spends on a cold compile of the radon benchmark
model (compiling ahead off, exclusive times of numba's compile events).

Where the implementation is a plain ``numba.njit`` function of the node's inputs
(:func:`numba_internals.plain_jit_parts`; positional parameters, as many as the node
has inputs, no defaults), the op kernel compiles that function itself, with its own
locals and options (PyTensor's fastmath set, its error model), under the kernel's
cache: the same code, compiled once. Its copy names :mod:`numba_cache.codegen.generated`
as its module, as the generated wrappers do: numba rebuilds a loaded kernel's
environment by importing the module its function names, and importing PyTensor's
numba dispatch would cost a warm process 0.1-0.2 s.

Any other implementation is called from a generated wrapper, as before: an
``@overload``'s Python function (PyTensor's ``Elemwise`` and fused kernels, whose
implementation numba picks by the argument types), a function of ``*args`` or with
defaults, a dispatcher of another class or compiler.
"""

from __future__ import annotations

import inspect
import textwrap
from types import FunctionType
from typing import NamedTuple

from numba_cache._compat import numba_internals
from numba_cache.codegen import generated
from numba_cache.codegen.module import compile_function
from numba_cache.codegen.sources import kernel_source
from numba_cache.kernels.assembly.generated_files import restore_source_file
from numba_cache.kernels.protocol.dispatcher import cached_dispatcher, dispatcher_with_options


class OpFunction(NamedTuple):
    """What an op kernel compiles: `function`, with numba's `targetoptions` and
    `local_types` (None: numba_cache's own options), and the `source` stored beside it."""

    function: FunctionType
    source: str
    targetoptions: dict | None = None
    local_types: dict | None = None

    def dispatcher(self, cache, fastmath: bool):
        """A dispatcher compiling the function through `cache` (`fastmath`: PyTensor's flag,
        for a wrapper; an implementation compiled itself keeps its own options)."""
        if self.targetoptions is None:
            return cached_dispatcher(self.function, cache, called_from_python=False,
                                     fastmath=fastmath)
        return dispatcher_with_options(self.function, cache, self.targetoptions,
                                       self.local_types, called_from_python=False)


def op_function(impl, n_inputs: int, name: str, filename: str) -> OpFunction:
    """The function of an op kernel named `name` computing a node of `n_inputs` inputs with
    PyTensor's implementation `impl`; a wrapper's source is compiled under `filename`."""
    parts = numba_internals.plain_jit_parts(impl)
    if parts is not None and takes_inputs(parts[0], n_inputs):
        function, local_types, targetoptions = parts
        restore_source_file(function)
        return OpFunction(_with_generated_module(function), _source_of(function, name),
                          targetoptions, local_types)
    source = kernel_source(name, n_inputs)
    return OpFunction(compile_function(source, name, filename, {"impl": impl}), source)


def takes_inputs(function, n_inputs: int) -> bool:
    """Whether `function` takes exactly `n_inputs` positional arguments, and nothing else."""
    code = getattr(function, "__code__", None)
    return (code is not None and code.co_argcount == n_inputs and not code.co_kwonlyargcount
            and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
            and not function.__defaults__)


def _with_generated_module(function: FunctionType) -> FunctionType:
    """A copy of `function` (its code, globals and closure) whose module is
    :mod:`numba_cache.codegen.generated`."""
    copy = FunctionType(function.__code__, function.__globals__, function.__name__, None,
                        function.__closure__)
    copy.__qualname__ = function.__qualname__
    copy.__module__ = generated.__name__
    return copy


def _source_of(function: FunctionType, name: str) -> str:
    """The readable copy stored with the kernel: the implementation's source, if it has one.

    PyTensor keeps the source it generated on the function (``__source__``); its file
    (:mod:`.generated_files`) is not read here. Any other implementation's source is
    read from its module's file.
    """
    heading = f"# {name}: PyTensor's implementation {function.__qualname__}, compiled itself\n"
    generated = getattr(function, "__source__", None)
    if isinstance(generated, str):
        return heading + generated
    try:
        return heading + textwrap.dedent(inspect.getsource(function))
    except Exception:  # no file, or one that cannot be read as source: the heading says what
        return heading
