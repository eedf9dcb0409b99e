"""A graph kernel as numba code elsewhere calls it: by the graph's inputs alone, by symbol.

PyTensor's JIT linker hands out the compiled graph as ``Function.vm.jit_fn``,
and code that builds numba functions of its own around a PyTensor function
(nutpie wraps it in a ``numba.cfunc``) calls it with the graph's inputs. A
numba_cache kernel takes its hidden constants (:mod:`numba_cache.keys.constants`)
as trailing arguments, so it is handed out behind an *entry point*: a small
numba function of the inputs alone that calls the stored kernel by its symbol.

Calling by symbol, rather than as numba calls one dispatcher from another, keeps
the kernel's object code out of the caller's module: the caller's compile does
not link and optimise the whole graph a second time (nutpie#334 measured 40 s
of a 260 s compile doing that), and the caller runs exactly the machine code the
store holds, the bits a Python call of the same function gives.

The hidden constants are passed as arrays over buffers this process holds,
named by symbol (:mod:`.hidden_symbols`), not by address: machine code holding an
entry point (nutpie's ``cfunc`` wrappers) can then be stored and loaded by
another process (:mod:`.cfunc`), which registers the same symbols for its own
buffers first. The entry point itself is compiled in every process that calls
it from numba (numba does not cache a dispatcher created without ``cache=True``)
and records the kernel signatures it called (``kernel_signatures``);
``hidden_symbols()`` names the buffers.

The call itself is :func:`.symbol_calls.emit_call`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from numba_cache import session
from numba_cache.kernels.callbacks import hidden_symbols
from numba_cache.kernels.assembly import symbol_calls

def is_entry_point(function) -> bool:
    """True if `function` is an entry point made by :func:`entry_point` in this process."""
    try:
        return function in session.current().entry_points
    except TypeError:  # not weakly referenceable, so not one of ours
        return False


def entry_point(dispatcher, n_inputs: int, hidden_values: Sequence[np.ndarray]):
    """A numba function of `n_inputs` arguments returning ``dispatcher(*inputs, *hidden_values)``."""
    from numba import njit

    from numba_cache.codegen.module import compile_function

    # Hashing the buffers waits until numba code uses the entry point: most never do.
    symbols = functools.cache(lambda: tuple(hidden_symbols.symbol_for(v) for v in hidden_values))
    signatures: list = []
    call = _kernel_call(dispatcher, tuple(hidden_values), symbols, signatures)
    arguments = ", ".join(f"i{position}" for position in range(n_inputs))
    source = f"def entry({arguments}):\n    return call(({arguments}{',' if n_inputs == 1 else ''}))\n"
    function = compile_function(source, "entry", f"<numba_cache entry point {n_inputs}>",
                                {"call": call})
    entry = njit(function)
    entry.kernel = dispatcher
    entry.hidden_values = hidden_values
    entry.hidden_symbols = symbols
    entry.kernel_signatures = signatures
    session.current().entry_points.add(entry)
    return entry


def _kernel_call(dispatcher, hidden_values: tuple, symbols: Callable, signatures: list):
    from numba import typeof
    from numba.core import cgutils
    from numba.extending import intrinsic

    hidden_types = tuple(typeof(value) for value in hidden_values)

    @intrinsic
    def call(typingctx, inputs_type):
        input_types = tuple(inputs_type)
        signature_types = input_types + hidden_types
        dispatcher.compile(signature_types)  # loads the kernel from the store, or compiles it
        result = dispatcher.overloads[signature_types]
        if signature_types not in signatures:
            signatures.append(signature_types)
        return_type = result.signature.return_type

        def codegen(context, builder, signature, arguments):
            inputs = cgutils.unpack_tuple(builder, arguments[0], len(input_types))
            hidden = [_array_over(context, builder, array_type, value, symbol)
                      for array_type, value, symbol
                      in zip(hidden_types, hidden_values, symbols(), strict=True)]
            return symbol_calls.emit_call(context, builder, result, [*inputs, *hidden])

        return return_type(inputs_type), codegen

    return call


def _array_over(context, builder, array_type, value: np.ndarray, symbol: str):
    """An array value of `array_type` viewing the buffer named `symbol`, which holds
    `value`'s content (no meminfo: not owned)."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.np.arrayobj import populate_array

    intp = context.get_value_type(types.intp)
    array = context.make_array(array_type)(context, builder)
    data_type = context.get_data_type(array_type.dtype).as_pointer()
    buffer = builder.module.globals.get(symbol)
    if buffer is None:
        buffer = ir.GlobalVariable(builder.module, ir.IntType(8), symbol)  # a declaration
    populate_array(
        array,
        data=builder.bitcast(buffer, data_type),
        shape=cgutils.pack_array(builder, [ir.Constant(intp, n) for n in value.shape]),
        strides=cgutils.pack_array(builder, [ir.Constant(intp, n) for n in value.strides]),
        itemsize=ir.Constant(intp, value.itemsize),
        meminfo=None,
    )
    return array._getvalue()
