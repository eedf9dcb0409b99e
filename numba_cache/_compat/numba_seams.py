"""numba's private API that numba_cache uses, each with the check that it is still there.

Each check looks at numba as installed; see :mod:`numba_cache._compat`.
"""

from __future__ import annotations

import functools
import inspect

from numba_cache._compat import numba_unique_ids, require, seam

__all__ = ["numba_unique_ids"]  # its seam registers on import

WRITTEN_FOR = ("0.68",)


@seam("CompileResult._reduce/_rebuild", "numba", WRITTEN_FOR, "kernels/serialize.py",
      compiles=True)
def compile_results() -> None:
    from numba_cache.kernels.serialize import self_test

    self_test()  # compiles, serializes, rebuilds and calls a tiny kernel


@seam("CPUCodeLibrary._optimize_final_module", "numba", WRITTEN_FOR, "kernels/self_contained.py",
      compiles=True)
def final_module_hook() -> None:
    import numba

    from numba_cache.kernels.self_contained import SelfContainedCompiler, is_self_contained

    dispatcher = numba.core.registry.CPUDispatcher(
        py_func=lambda x: x + 1.0, locals={}, targetoptions={"nopython": True},
        pipeline_class=SelfContainedCompiler)
    dispatcher.compile((numba.float64,))
    library = dispatcher.overloads[(numba.float64,)].library
    require(type(library).__name__ == "SelfContainedLibrary",
            "the compiler pipeline no longer takes the library from state.library")
    require(is_self_contained(library), "_optimize_final_module is no longer called")


@seam("ObjModeUtils._call_objmode_dispatcher", "numba", WRITTEN_FOR, "kernels/objmode.py")
def objmode_dispatcher() -> None:
    from numba.core import pythonapi

    function = inspect.getattr_static(pythonapi.ObjModeUtils, "_call_objmode_dispatcher", None)
    require(isinstance(function, staticmethod), "ObjModeUtils._call_objmode_dispatcher is gone")
    # The method, not the class: a class's source is found by parsing its whole module.
    require("_call_objmode_dispatcher" in inspect.getsource(
        pythonapi.ObjModeUtils.load_dispatcher),
            "object-mode code no longer calls ObjModeUtils._call_objmode_dispatcher")


@seam("CFunc.__init__/_cache/_compiler", "numba", WRITTEN_FOR, "kernels/cfunc.py")
def cfunc() -> None:
    from numba.core.ccallback import CFunc

    # numba's, or numba_cache's wrapper of it (kernels/cfunc.py), which takes the same.
    parameters = list(inspect.signature(CFunc.__init__).parameters)
    require(parameters == ["self", "pyfunc", "sig", "locals", "options", "pipeline_class"],
            f"CFunc.__init__ takes {parameters}")
    source = inspect.getsource(CFunc.compile)
    require("self._cache.load_overload" in source and "self._cache.save_overload" in source,
            "CFunc.compile no longer consults self._cache")
    require("pipeline_class" in inspect.getsource(CFunc.__init__),
            "CFunc no longer hands its compiler a pipeline class")


@seam("typing registry globals", "numba", WRITTEN_FOR, "integration/nutpie.py")
def typing_registry() -> None:
    from numba.core.extending import overload
    from numba.core.typing.templates import builtin_registry

    def probe():
        pass

    def implementation():
        return lambda: None

    overload(probe)(implementation)
    found = [typ for value, typ in builtin_registry.globals if value is probe]
    require(len(found) == 1 and found[0].templates[0]._overload_func is implementation,
            "overloads are no longer found in builtin_registry.globals")


@seam("Dispatcher._cache", "numba", WRITTEN_FOR, "kernels/cache.py, kernels/dispatcher.py")
def dispatcher_cache() -> None:
    from numba.core import caching, dispatcher

    source = inspect.getsource(dispatcher.Dispatcher.compile)  # a method's: cheap to find
    require("self._cache.load_overload" in source and "self._cache.save_overload" in source,
            "Dispatcher no longer consults self._cache")
    abstract = getattr(caching._Cache, "__abstractmethods__", frozenset())
    require({"load_overload", "save_overload"} <= abstract, "caching._Cache changed its methods")


@seam("CPUCodeLibrary._unserialize steps, _get_module_for_linking, JitEngine._defined_symbols",
      "numba", WRITTEN_FOR, "kernels/stored_library.py, _compat/numba_internals.py",
      compiles=True)
def stored_libraries() -> None:
    """A kernel loaded as a StoredLibrary (the self-test calls one) records the symbols
    numba's loader would register, and hands its linking module to whatever links it.
    (That the engine then knows them cannot be seen here, where the probe's own compile
    registered them: a warm process that loads a kernel fails without them.)"""
    import numba
    from numba.core import codegen, compiler

    from numba_cache._compat import numba_internals
    from numba_cache.kernels import stored_library

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

    probe = numba.njit(cache=False)(lambda x: x * 2.0)
    probe.compile((numba.float64,))
    compiled = probe.overloads[(numba.float64,)]
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


@seam("CodeLibrary._disable_inspection, CompileResult._find_referenced_environments", "numba",
      WRITTEN_FOR, "kernels/cache.py, kernels/serialize.py")
def inspection_and_environments() -> None:
    """Code numba loaded from a cache is marked uninspectable where ``get_llvm_str`` looks;
    the environments a compile result keeps are found by their globals' prefix and
    filtered by ``can_cache`` (numba_internals keeps the filtered ones too)."""
    from numba.core import codegen, compiler

    from numba_cache._compat import numba_internals

    require("self._disable_inspection = True" in inspect.getsource(
        codegen.CodeLibrary._set_compiled_object), "loaded code is no longer marked uninspectable")
    require("self._disable_inspection" in inspect.getsource(
        codegen.CPUCodeLibrary._sentry_cache_disable_inspection),
        "get_llvm_str no longer warns through _disable_inspection")
    finder = inspect.getsource(compiler.CompileResult._find_referenced_environments)
    require(numba_internals.ENVIRONMENT_GLOBAL_PREFIX in finder and "can_cache()" in finder,
            "CompileResult finds its environments otherwise")
    require(compiler.CR_FIELDS[-1] == "referenced_envs"
            and "tuple(referenced_envs))" in inspect.getsource(compiler.CompileResult._reduce),
            "CompileResult._reduce no longer ends with the referenced environments")


@seam("CPUCodegen CPU choice (config.CPU_NAME/CPU_FEATURES, _tm_features), "
      "CPUTarget._toplevel_target_context", "numba", WRITTEN_FOR, "cpu_target.py")
def codegen_cpu() -> None:
    """numba's code generator takes its CPU from the config when it is made, once."""
    import functools

    from numba.core import codegen, registry

    require(isinstance(inspect.getattr_static(registry.CPUTarget, "_toplevel_target_context",
                                              None), functools.cached_property),
            "the CPU target context is no longer a cached property")
    require("config.CPU_NAME" in inspect.getsource(codegen.CPUCodegen._get_host_cpu_name)
            and "config.CPU_FEATURES" in inspect.getsource(
                codegen.CPUCodegen._get_host_cpu_features),
            "the code generator reads its CPU elsewhere than numba's config")
    require("self._tm_features = self._customize_tm_features()" in inspect.getsource(
        codegen.CPUCodegen._init) and "options['cpu'] = self._get_host_cpu_name()" in
        inspect.getsource(codegen.JITCPUCodegen._customize_tm_options),
        "the JIT target machine is made from other CPU settings")


@seam("ObjModeLiftedWith._memo/_uuid", "numba", WRITTEN_FOR, "kernels/blocks.py")
def objmode_blocks() -> None:
    import numba

    from numba_cache._compat import numba_internals

    probe = numba.njit(lambda x: x)
    uuid = numba_internals.dispatcher_uuid(probe)
    require(isinstance(uuid, str) and uuid, "dispatchers no longer have a _uuid")
    require(numba_internals.block_dispatcher(uuid) is probe,
            "dispatchers are no longer found by uuid in _memo")


@functools.cache
def _symbol_call_probe() -> tuple:
    """A callee (times 3) and a caller of it by symbol compiled as a graph kernel is,
    its body emitted by :mod:`numba_cache.kernels.graph_body`: their compile results,
    once the caller gave 6 for 2, and whether the caller compiled with numba's
    registries installed leanly (:class:`numba_cache.kernels.glue.GlueCompiler`).
    Compiled once for the seams that read it (the self-test is part of a store's
    first compile)."""
    import numba

    from numba_cache.codegen.sources import Step
    from numba_cache.kernels.glue import GlueCompiler
    from numba_cache.kernels.graph_body import graph_body

    callee = numba.core.registry.CPUDispatcher(
        py_func=lambda x: x * 3.0, locals={},
        targetoptions={"nopython": True, "no_cpython_wrapper": True, "no_cfunc_wrapper": True})

    def serve(kernel, signature):
        callee.compile(signature)
        return callee.overloads[signature], True

    body = graph_body(["x"], {}, [Step("k0", ("x",), ("v0_0",))], ["v0_0"], serve)
    caller = numba.core.registry.CPUDispatcher(
        py_func=lambda x: body(x), locals={}, targetoptions={"nopython": True},
        pipeline_class=GlueCompiler)
    full_refreshes = GlueCompiler.full_refreshes
    require(caller(2.0) == (6.0,), "a call by symbol returned a wrong value")
    [callee_compiled], [caller_compiled] = callee.overloads.values(), caller.overloads.values()
    return callee_compiled, caller_compiled, GlueCompiler.full_refreshes == full_refreshes


@seam("calls by symbol (call_conv, fndesc.mangled_name)", "numba", WRITTEN_FOR,
      "kernels/symbol_calls.py, kernels/graph_body.py, kernels/op_links.py", compiles=True)
def calls_by_symbol() -> None:
    from numba_cache._compat import numba_internals

    callee, caller, _ = _symbol_call_probe()
    symbol = callee.fndesc.mangled_name
    declared = [function for function in numba_internals.final_module(caller.library).functions
                if function.name == symbol]
    require(len(declared) == 1 and declared[0].is_declaration,
            "the caller's module no longer only declares the callee")


@seam("CPUCallConv.call_function (_get_arg_packer, _get_return_status, excinfo_t)", "numba",
      WRITTEN_FOR, "_compat/numba_internals.py (call_reusing_slots), kernels/graph_body.py",
      compiles=True)
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


@seam("rtsys.initialize (nrtdynmod.compile_nrt_functions)", "numba", WRITTEN_FOR,
      "kernels/runtime.py")
def runtime_library() -> None:
    from numba.core.registry import cpu_target
    from numba.core.runtime import nrtdynmod, rtsys

    from numba_cache._compat import numba_internals

    require(isinstance(numba_internals.runtime_initialized(), bool), "rtsys._init is gone")
    source = inspect.getsource(type(rtsys).initialize)
    require("nrtdynmod.compile_nrt_functions(ctx)" in source and "self._library =" in source,
            "rtsys.initialize no longer takes its library from nrtdynmod.compile_nrt_functions")
    module, library = nrtdynmod.create_nrt_module(cpu_target.target_context)
    require(callable(library.enable_object_caching) and "NRT_incref" in module.globals,
            "nrtdynmod.create_nrt_module no longer returns the runtime's module and library")


@seam("CPUCodeLibrary._optimize_functions, _linking_libraries", "numba", WRITTEN_FOR,
      "kernels/glue.py", compiles=True)
def glue_library() -> None:
    _, glue, _ = _symbol_call_probe()
    require(type(glue.library).__name__ == "GlueLibrary" and glue.library.only_calls(),
            "a glue kernel's library is not numba_cache's, or lists other linked libraries")
    require(glue.library.optimised_lightly, "_optimize_final_module is no longer called")


@seam("BaseContext.refresh (typing, target), _registries, builtin_registry.globals", "numba",
      WRITTEN_FOR, "_compat/numba_internals.py (lean_refresh), kernels/glue.py", compiles=True)
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
