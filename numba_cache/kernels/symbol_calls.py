"""Calls from one numba function to another's compiled code, by its symbol.

numba calls a dispatcher from nopython code by linking the callee's LLVM module
into the caller's (``CPUCodeLibrary.add_linking_library``), where the whole is
optimised and compiled again: every graph calling an op kernel pays LLVM for
that kernel anew. A call by symbol only declares the callee: the caller's
module holds the call, and the engine binds it to the code already loaded in
this process (compiled here, or loaded from the store) when it loads the
caller. The caller compiles in a fraction of the time and runs exactly the
machine code the store holds for each callee.

Code that calls by symbol can be loaded only where every callee is loaded under
the same symbol first: graph kernels record their op kernels (:mod:`.op_links`),
code around an entry point records its graph kernel (:mod:`.links`).

numba internals used here, all public in numba's extension API except the
calling convention (``context.call_conv``), which PyTensor's own numba backend
relies on too: ``Dispatcher.overloads``, ``CompileResult.fndesc.mangled_name``.
"""

from __future__ import annotations

from collections.abc import Callable


def emit_call(context, builder, compiled, arguments: list):
    """Lower a call of `compiled` (a numba compile result) with `arguments`, by symbol.

    An error the callee raises propagates to the caller's caller, as in a
    call numba makes itself.
    """
    from numba.core import cgutils

    return_type, argument_types = compiled.signature.return_type, compiled.signature.args
    function_type = context.call_conv.get_function_type(return_type, argument_types)
    function = cgutils.get_or_insert_function(
        builder.module, function_type, compiled.fndesc.mangled_name)
    status, value = context.call_conv.call_function(
        builder, function, return_type, argument_types, arguments)
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)
    return value


def caller(dispatcher, n_arguments: int, served: Callable):
    """A numba intrinsic of `n_arguments` arguments returning ``dispatcher(*arguments)``.

    Typing it compiles (or loads) `dispatcher` for the arguments' types without
    literal values; ``served(compiled)`` then gives the compile result to call
    (this one, or the same kernel's code already serving this process) and
    whether to call it by symbol. If not, its library is linked in, as numba
    links a dispatcher's.
    """
    from numba.core import types
    from numba.extending import intrinsic

    from numba_cache.codegen.module import compile_function

    def typer(typingctx, *argument_types):
        signature_types = tuple(types.unliteral(type_) for type_ in argument_types)
        dispatcher.compile(signature_types)
        compiled, by_symbol = served(dispatcher.overloads[signature_types])

        def codegen(context, builder, signature, arguments):
            values = [context.cast(builder, value, given, wanted) for value, given, wanted
                      in zip(arguments, argument_types, signature_types, strict=True)]
            if not by_symbol:
                context.add_linking_libs([compiled.library])
            return emit_call(context, builder, compiled, values)

        return compiled.signature.return_type(*argument_types), codegen

    # numba's intrinsics take a fixed number of arguments.
    names = ", ".join(f"a{position}" for position in range(n_arguments))
    source = f"def call(typingctx, {names}):\n    return typer(typingctx, {names})\n"
    return intrinsic(compile_function(source, "call", f"<numba_cache call {n_arguments}>",
                                      {"typer": typer}))
