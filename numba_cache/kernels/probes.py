"""Probes: the seams whose check runs numba_cache's own code on numba as installed.

A probe compiles a tiny kernel through the code that relies on numba's private API
(serialization, stored code libraries, calls by symbol, the glue pipeline) and checks
what comes out. They are the only costly checks of the self-test
(:mod:`.context`), and live here, beside the code they run, so that
:mod:`numba_cache._compat` (the seams checked by looking) imports nothing above it.
Where a vouch stands for the same fingerprint, probes are skipped
(:mod:`numba_cache.store.tier_notes`).
"""

from __future__ import annotations

import functools
import inspect

from numba_cache._compat import Seam, require
from numba_cache._compat.numba_seams import WRITTEN_FOR

PROBES: list[Seam] = []


def probe(name: str, upstream: str, written_for: tuple[str, ...], used_by: str):
    """Decorator: register the decorated function as the check of a probe."""
    def register(check):
        PROBES.append(Seam(name, upstream, written_for, used_by, check, compiles=True))
        return check
    return register


@probe("CompileResult._reduce/_rebuild", "numba", WRITTEN_FOR, "kernels/protocol/serialize.py")
def compile_results() -> None:
    from numba_cache.kernels.protocol.serialize import self_test

    self_test()  # compiles, serializes, rebuilds and calls a tiny kernel


@functools.cache
def _op_kernel_probe():
    """The compile result of a kernel compiled as op kernels are (times 3, for a float):
    self-contained, without numba's CPython and cfunc wrappers. Compiled once for the
    seams that read it (the self-test is part of a store's first compile)."""
    import numba

    from numba_cache.kernels.protocol.self_contained import SelfContainedCompiler

    kernel = numba.core.registry.CPUDispatcher(
        py_func=lambda x: x * 3.0, locals={},
        targetoptions={"nopython": True, "no_cpython_wrapper": True, "no_cfunc_wrapper": True},
        pipeline_class=SelfContainedCompiler)
    kernel.compile((numba.float64,))
    return kernel.overloads[(numba.float64,)]


@probe("CPUCodeLibrary._optimize_final_module", "numba", WRITTEN_FOR, "kernels/protocol/self_contained.py")
def final_module_hook() -> None:
    from numba_cache.kernels.protocol.self_contained import is_self_contained

    library = _op_kernel_probe().library
    require(type(library).__name__ == "SelfContainedLibrary",
            "the compiler pipeline no longer takes the library from state.library")
    require(is_self_contained(library), "_optimize_final_module is no longer called")


@probe("CPUCodeLibrary._unserialize steps, _get_module_for_linking, JitEngine._defined_symbols",
      "numba", WRITTEN_FOR, "kernels/protocol/stored_library.py, _compat/numba_internals.py")
def stored_libraries() -> None:
    """A kernel loaded as a StoredLibrary (the self-test calls one) records the symbols
    numba's loader would register, and hands its linking module to whatever links it.
    (That the engine then knows them cannot be seen here, where the probe's own compile
    registered them: a warm process that loads a kernel fails without them.)"""
    from numba.core import codegen, compiler

    from numba_cache._compat import numba_internals
    from numba_cache.kernels.protocol import stored_library

    loader = inspect.getsource(codegen.CPUCodeLibrary._unserialize)
    steps = ("self.enable_object_caching()", "self._set_compiled_object(object_code)",
             "self._finalize_final_module()", "_load_defined_symbols(self._shared_module)")
    missing = [step for step in steps if step not in loader]
    require(not missing, f"numba loads object code otherwise (not found: {missing})")
    rebuild = inspect.getsource(compiler.CompileResult._rebuild)
    require("target_context.get_executable(library, fndesc, env)" in rebuild
            and "library.codegen.set_env(env.env_name, env)" in rebuild,
            "CompileResult._rebuild no longer rebuilds as rebuild_compile_result repeats it")
    require("library._get_module_for_linking()" in inspect.getsource(codegen.CPUCodeLibrary.finalize),
            "numba no longer links a library in through _get_module_for_linking")

    compiled = _op_kernel_probe()
    symbols = stored_library.defined_symbols(compiled.library)
    state = numba_internals.reduce_compile_result(compiled)[0]
    library = stored_library.load(compiled.library.codegen, state, symbols)
    require(not library.linking_module_parsed, "loading parsed the linking module")
    linking = numba_internals.module_for_linking(library)
    defined = {value.name for value in (*linking.functions, *linking.global_variables)
               if not value.is_declaration}
    require(defined == set(symbols.decode().split("\n")),
            "the recorded symbols are not those of the stored linking module")
    require(compiled.fndesc.mangled_name in defined,
            "the linking module parsed on demand lacks the kernel's function")


@functools.cache
def _symbol_call_probe() -> tuple:
    """A callee (:func:`_op_kernel_probe`) and a caller of it by symbol compiled as a graph kernel is,
    its body emitted by :mod:`numba_cache.kernels.assembly.graph_body`: their compile results,
    once the caller gave 6 for 2, and whether the caller compiled with numba's
    registries installed leanly (:class:`numba_cache.kernels.assembly.glue.GlueCompiler`).
    Compiled once for the seams that read it (the self-test is part of a store's
    first compile)."""
    import numba

    from numba_cache.codegen.sources import Step
    from numba_cache.kernels.assembly.glue import GlueCompiler
    from numba_cache.kernels.assembly.graph_body import graph_body

    callee = _op_kernel_probe()

    def serve(kernel, signature):
        require(signature == callee.signature.args, f"the probe's caller typed {signature}")
        return callee, True

    body = graph_body(["x"], {}, [Step("k0", ("x",), ("v0_0",))], ["v0_0"], serve)
    caller = numba.core.registry.CPUDispatcher(
        py_func=lambda x: body(x), locals={}, targetoptions={"nopython": True},
        pipeline_class=GlueCompiler)
    full_refreshes = GlueCompiler.full_refreshes
    require(caller(2.0) == (6.0,), "a call by symbol returned a wrong value")
    [caller_compiled] = caller.overloads.values()
    return callee, caller_compiled, GlueCompiler.full_refreshes == full_refreshes


@probe("calls by symbol (call_conv, fndesc.mangled_name)", "numba", WRITTEN_FOR,
      "kernels/assembly/symbol_calls.py, kernels/assembly/graph_body.py, kernels/assembly/op_links.py")
def calls_by_symbol() -> None:
    from numba_cache._compat import numba_internals

    callee, caller, _ = _symbol_call_probe()
    symbol = callee.fndesc.mangled_name
    declared = [function for function in numba_internals.final_module(caller.library).functions
                if function.name == symbol]
    require(len(declared) == 1 and declared[0].is_declaration,
            "the caller's module no longer only declares the callee")


@probe("CPUCallConv.call_function (_get_arg_packer, _get_return_status, excinfo_t)", "numba",
      WRITTEN_FOR, "_compat/numba_internals.py (call_reusing_slots), kernels/assembly/graph_body.py")
def call_function_steps() -> None:
    """call_reusing_slots repeats call_function's steps with slots of its own: they must
    still be these (the probe's caller ran through it and gave the right value)."""
    from numba.core import callconv

    _symbol_call_probe()
    source = inspect.getsource(callconv.CPUCallConv.call_function)
    steps = ("self._get_arg_packer(argtys)", "arginfo.as_arguments(builder, args)",
             "realargs = [retvaltmp, excinfoptr] + args",
             "self._get_return_status(builder, code,", "builder.load(excinfoptr)",
             "self.context.get_returned_value(builder, resty, retval)")
    missing = [step for step in steps if step not in source]
    require(not missing, "CPUCallConv.call_function no longer makes a call as "
            f"call_reusing_slots repeats it (not found: {missing})")
    require(isinstance(callconv.excinfo_t, callconv.ir.LiteralStructType),
            "callconv.excinfo_t is gone")


@probe("CPUCodeLibrary._optimize_functions, _linking_libraries", "numba", WRITTEN_FOR,
      "kernels/assembly/glue.py")
def glue_library() -> None:
    _, glue, _ = _symbol_call_probe()
    require(type(glue.library).__name__ == "GlueLibrary" and glue.library.only_calls(),
            "a glue kernel's library is not numba_cache's, or lists other linked libraries")
    require(glue.library.optimised_lightly, "_optimize_final_module is no longer called")


@probe("BaseContext.refresh (typing, target), _registries, builtin_registry.globals", "numba",
      WRITTEN_FOR, "_compat/numba_internals.py (lean_refresh), kernels/assembly/glue.py")
def lean_refresh() -> None:
    """A graph function compiles with numba's registries installed leanly; where that
    fails, it is compiled again after numba's full refresh (slower, same code)."""
    from numba.core import base, compiler
    from numba.core.typing import context, templates

    source = inspect.getsource(compiler.CompilerBase.__init__)
    require("typingctx.refresh()" in source and "targetctx.refresh()" in source,
            "CompilerBase.__init__ no longer refreshes the contexts")
    require(callable(context.BaseContext.refresh) and callable(base.BaseContext.refresh),
            "the contexts' refresh methods are gone")
    require(isinstance(templates.builtin_registry.globals, list),
            "numba's typing registry no longer lists its globals")
    _, _, lean = _symbol_call_probe()
    require(lean, "the probe's graph function needed numba's full refresh")
