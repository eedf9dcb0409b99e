"""numba's private API that numba_cache uses, each with the check that it is still there.

Each check looks at numba as installed; see :mod:`numba_cache._compat`.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

from numba_cache._compat import numba_internals, numba_unique_ids, require, seam

__all__ = ["numba_unique_ids"]  # its seam registers on import

WRITTEN_FOR = ("0.68",)



@seam("ObjModeUtils._call_objmode_dispatcher", "numba", WRITTEN_FOR, "kernels/runtime/objmode.py")
def objmode_dispatcher() -> None:
    from numba.core import pythonapi

    function = inspect.getattr_static(pythonapi.ObjModeUtils, "_call_objmode_dispatcher", None)
    require(isinstance(function, staticmethod), "ObjModeUtils._call_objmode_dispatcher is gone")
    # The method, not the class: a class's source is found by parsing its whole module.
    require("_call_objmode_dispatcher" in inspect.getsource(
        pythonapi.ObjModeUtils.load_dispatcher),
            "object-mode code no longer calls ObjModeUtils._call_objmode_dispatcher")


@seam("CFunc.__init__/_cache/_compiler", "numba", WRITTEN_FOR, "kernels/callbacks/cfunc.py")
def cfunc() -> None:
    from numba.core.ccallback import CFunc

    # numba's, or numba_cache's wrapper of it (kernels/callbacks/cfunc.py), which takes the same.
    parameters = list(inspect.signature(CFunc.__init__).parameters)
    require(parameters == ["self", "pyfunc", "sig", "locals", "options", "pipeline_class"],
            f"CFunc.__init__ takes {parameters}")
    source = inspect.getsource(CFunc.compile)
    require("self._cache.load_overload" in source and "self._cache.save_overload" in source,
            "CFunc.compile no longer consults self._cache")
    require("pipeline_class" in inspect.getsource(CFunc.__init__),
            "CFunc no longer hands its compiler a pipeline class")


@seam("_OverloadFunctionTemplate._get_jit_decorator/_build_impl, _FunctionCompiler flags, "
      "TargetConfig.options", "numba", WRITTEN_FOR, "kernels/protocol/overload_cache.py")
def overload_implementations() -> None:
    import numba
    from numba.core import compiler, dispatcher as dispatchers

    template = numba_internals.overload_template_class()
    build = inspect.getsource(template._build_impl)
    require("jitter = self._get_jit_decorator()" in build and "jitter(**self._jit_options)" in build,
            "an @overload's implementation is no longer wrapped by _get_jit_decorator's decorator")
    require(callable(getattr(template, "_get_jit_decorator", None)),
            "_OverloadFunctionTemplate._get_jit_decorator is gone")
    core = inspect.getsource(dispatchers._FunctionCompiler._compile_core)
    require("parse_as_flags(flags, self.targetoptions)" in core
            and "self._customize_flags(flags)" in core,
            "a dispatcher's compile flags are no longer made from its target options")

    def probe(values):
        return values

    dispatcher = numba.njit(fastmath=True)(probe)
    values = numba_internals.flag_values(numba_internals.compile_flags(dispatcher))
    require(set(values) == set(compiler.Flags.options) and values["fastmath"],
            "the compile flags do not hold the dispatcher's options")


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


@seam("Dispatcher._cache", "numba", WRITTEN_FOR, "kernels/protocol/cache.py, kernels/protocol/dispatcher.py")
def dispatcher_cache() -> None:
    from numba.core import caching, dispatcher

    source = inspect.getsource(dispatcher.Dispatcher.compile)  # a method's: cheap to find
    require("self._cache.load_overload" in source and "self._cache.save_overload" in source,
            "Dispatcher no longer consults self._cache")
    abstract = getattr(caching._Cache, "__abstractmethods__", frozenset())
    require({"load_overload", "save_overload"} <= abstract, "caching._Cache changed its methods")


@seam("Dispatcher._compiler.pipeline_class, py_func, locals, targetoptions", "numba", WRITTEN_FOR,
      "kernels/assembly/op_function.py")
def plain_jit_parts() -> None:
    """A ``numba.njit`` dispatcher keeps its function, locals and options where
    :func:`numba_internals.plain_jit_parts` reads them, and compiles with numba's compiler."""
    import numba

    def probe(x):
        return x + 1

    parts = numba_internals.plain_jit_parts(
        numba.njit(probe, fastmath=True, locals={"x": numba.float64}))
    require(parts is not None, "numba.njit's dispatcher no longer compiles with numba's Compiler")
    function, local_types, options = parts
    require(function is probe and local_types == {"x": numba.float64},
            "a dispatcher keeps its function or locals otherwise")
    require(options.get("nopython") is True and options.get("fastmath") is True,
            f"a dispatcher keeps its options otherwise: {options}")


@seam("CodeLibrary._disable_inspection, CompileResult._find_referenced_environments", "numba",
      WRITTEN_FOR, "kernels/protocol/cache.py, kernels/protocol/serialize.py")
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


@seam("ObjModeLiftedWith._memo/_uuid", "numba", WRITTEN_FOR, "kernels/runtime/blocks.py")
def objmode_blocks() -> None:
    import numba

    from numba_cache._compat import numba_internals

    probe = numba.njit(lambda x: x)
    uuid = numba_internals.dispatcher_uuid(probe)
    require(isinstance(uuid, str) and uuid, "dispatchers no longer have a _uuid")
    require(numba_internals.block_dispatcher(uuid) is probe,
            "dispatchers are no longer found by uuid in _memo")


@seam("serialize._numba_unpickle/_unpickled_memo, _rebuild_env, get_executable's module, "
      "FunctionIdentity.func", "numba", WRITTEN_FOR, "kernels/runtime/detached.py")
def detached_blocks() -> None:
    from numba.core import bytecode, cpu, environment, serialize

    require(list(inspect.signature(serialize._numba_unpickle).parameters)
            == ["address", "bytedata", "hashed"] and isinstance(serialize._unpickled_memo, dict),
            "machine code no longer unpickles through serialize._numba_unpickle(address, "
            "bytedata, hashed) memoised in _unpickled_memo")
    require(list(inspect.signature(environment._rebuild_env).parameters)
            == ["modname", "consts", "env_name"]
            and "_rebuild_env" in inspect.getsource(environment.Environment.__reduce__),
            "environments are no longer rebuilt by _rebuild_env(modname, consts, env_name)")
    source = inspect.getsource(cpu.CPUContext.get_executable)
    require("_dynfunc.make_function(fndesc.lookup_module()" in source
            and "fndesc.llvm_cpython_wrapper_name" in source,
            "CPUContext.get_executable no longer makes its function as numba_internals does")
    require("func" in inspect.getsource(bytecode.FunctionIdentity.from_function),
            "FunctionIdentity no longer keeps the function it identifies")


@seam("numba.np.linalg._blas_kinds never written after its definition", "numba", WRITTEN_FOR,
      "_compat/numba_internals.py (NEVER_WRITTEN), kernels/runtime/detached.py")
def never_written_containers() -> None:
    for module, names in numba_internals.NEVER_WRITTEN.items():
        # Read, not imported: importing numba.np.linalg is what carrying its values spares.
        source = Path(importlib.util.find_spec(module).origin).read_text()
        for name in names:
            definitions = re.findall(rf"^{name}\s*=", source, re.MULTILINE)
            writes = re.findall(
                rf"\b{name}\s*(\[[^\]]*\]\s*)?([-+*/|&^%@]|//|<<|>>)?=(?!=)"
                rf"|\b{name}\.(update|setdefault|pop|popitem|clear|__setitem__|__delitem__)\b"
                rf"|\bglobal\b[^\n]*\b{name}\b|\bdel\s+{name}\b", source)
            require(len(definitions) == 1 and len(writes) == 1,
                    f"{module}.{name} is written besides its definition")


@seam("Dispatcher._compilation_chain_init_hook (entrypoints.init_all)", "numba", WRITTEN_FOR,
      "kernels/protocol/dispatcher.py, kernels/protocol/self_contained.py")
def extension_loading() -> None:
    from numba.core import dispatcher, entrypoints

    require("self._compilation_chain_init_hook()" in inspect.getsource(
        dispatcher._DispatcherBase._compile_for_args),
            "dispatchers no longer load numba's extensions through _compilation_chain_init_hook")
    require("entrypoints.init_all()" in inspect.getsource(
        dispatcher._DispatcherBase._compilation_chain_init_hook) and callable(entrypoints.init_all),
            "numba's extensions are no longer loaded by entrypoints.init_all")


@seam("rtsys.initialize (nrtdynmod.compile_nrt_functions)", "numba", WRITTEN_FOR,
      "kernels/runtime/numba_runtime.py")
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


@seam("CPUCallConv.return_status_propagate, _get_return_status (RETCODE_*), "
      "_get_excinfo_argument, _return_errcode_raw", "numba", WRITTEN_FOR,
      "_compat/numba_internals.py (propagate_unless_ok), kernels/assembly/symbol_calls.py")
def error_propagation() -> None:
    """propagate_unless_ok returns a failed call's error as numba's propagation does:
    these steps."""
    from numba.core import callconv

    propagate = inspect.getsource(callconv.CPUCallConv.return_status_propagate)
    steps = ("self._get_excinfo_argument(builder.function)",
             "builder.store(status.excinfoptr, excptr)",
             "builder.if_then(builder.not_(trystatus.in_try))",
             "self._return_errcode_raw(builder, status.code)")
    missing = [step for step in steps if step not in propagate]
    require(not missing, "CPUCallConv.return_status_propagate no longer returns a call's "
            f"error as propagate_unless_ok does (not found: {missing})")
    status = inspect.getsource(callconv.CPUCallConv._get_return_status)
    steps = ("builder.icmp_signed('==', code, RETCODE_OK)",
             "builder.icmp_signed('==', code, RETCODE_NONE)", "ok = builder.or_(norm, none)",
             "builder.icmp_signed('>=', code, RETCODE_USEREXC)",
             "builder.select(is_user_exc, excinfoptr,")
    missing = [step for step in steps if step not in status]
    require(not missing, "CPUCallConv._get_return_status no longer reads a call's status "
            f"as propagate_unless_ok does (not found: {missing})")
    require([callconv.RETCODE_OK.constant, callconv.RETCODE_NONE.constant]
            == [0, -2] and callconv.RETCODE_USEREXC.constant >= 1,
            "numba's return codes changed")
