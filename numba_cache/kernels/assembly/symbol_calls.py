"""Calls from one numba function to another's compiled code, by its symbol.

numba calls a dispatcher from nopython code by linking the callee's LLVM module
into the caller's (``CPUCodeLibrary.add_linking_library``), where the whole is
optimised and compiled again: every graph calling an op kernel pays LLVM for
that kernel anew. A call by symbol only declares the callee: the caller's
module holds the call, and the engine binds it to the code already loaded in
this process (compiled here, or loaded from the store) when it loads the
caller. The caller compiles in a fraction of the time and runs exactly the
machine code the store holds for each callee.

Graph kernels make these calls from their body (:mod:`.graph_body`), code around
an entry point from its own intrinsic (:mod:`.entry_point`). Code that calls by
symbol can be loaded only where every callee is loaded under the same symbol
first: graph kernels record their op kernels (:mod:`.op_links`), code around an
entry point records its graph kernel (:mod:`.links`).

numba internals used here, all public in numba's extension API except the
calling convention (``context.call_conv``), which PyTensor's own numba backend
relies on too: ``Dispatcher.overloads``, ``CompileResult.fndesc.mangled_name``; for
calls sharing their result slots, the calling convention's argument packer
(:func:`numba_cache._compat.numba_internals.call_reusing_slots`), and its return codes
and exception argument for their errors
(:func:`numba_cache._compat.numba_internals.propagate_unless_ok`).
"""

from __future__ import annotations

from numba_cache._compat import numba_internals


def emit_call(context, builder, compiled, arguments: list, slots: dict | None = None):
    """Lower a call of `compiled` (a numba compile result) with `arguments`, by symbol.

    An error the callee raises propagates to the caller's caller, as in a
    call numba makes itself. Calls given the same `slots` (a dict, filled here)
    share the stack slots the callees write their results into: a function of a
    thousand calls has a few slots, not two thousand, which LLVM's register
    allocation and stack slot colouring pay for more than linearly (the large
    benchmark model's machine code: 2.5 s, 2.0 s with shared slots); their errors
    propagate in less IR than numba's (:func:`numba_internals.propagate_unless_ok`).
    """
    from numba.core import cgutils

    return_type, argument_types = compiled.signature.return_type, compiled.signature.args
    function_type = context.call_conv.get_function_type(return_type, argument_types)
    function = cgutils.get_or_insert_function(
        builder.module, function_type, compiled.fndesc.mangled_name)
    if slots is not None:
        return numba_internals.call_reusing_slots(
            context, builder, function, return_type, argument_types, arguments, slots)
    status, value = context.call_conv.call_function(
        builder, function, return_type, argument_types, arguments)
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)
    return value
