"""numba's private API, as plain functions: the rest of numba_cache reaches numba's
internals only through these (and the patches beside them in this package).

Each is checked by a seam of :mod:`.numba_seams`.
"""

from __future__ import annotations

import contextlib

from numba_cache import session


#: The prefix of the LLVM globals that hold a function's environment pointer.
ENVIRONMENT_GLOBAL_PREFIX = "_ZN08NumbaEnv"

#: Module-level containers of numba's that numba fills where it defines them and never
#: writes again: a copy reads as the original does. ``get_blas_kind`` reads
#: ``_blas_kinds`` (numba types to BLAS letters) for PyTensor's pointer lookups.
NEVER_WRITTEN = {"numba.np.linalg": frozenset({"_blas_kinds"})}


def reduce_compile_result(cres, every_environment: bool = False) -> tuple:
    """What numba's own cache pickles of a compile result (``CompileResult._reduce``).

    numba's keeps the environments the code refers to only for functions defined in a
    module (``Environment.can_cache``); `every_environment` keeps those of functions
    exec'd without one too (PyTensor's generated kernels), for a caller whose pickler
    rebuilds them against a module of its own. Left out, such a function's environment
    pointer stays NULL in a process that loads the code, and a raise with values known
    only at run time fails there with ``RuntimeError: Error creating Python tuple from
    runtime exception arguments`` (numba's unwrapping of the values checks the pointer).
    """
    reduced = cres._reduce()
    if not every_environment:
        return reduced
    return (*reduced[:-1], referenced_environments(cres))


def referenced_environments(cres) -> tuple:
    """Every live environment the code of `cres` refers to, by name (numba's
    ``_find_referenced_environments`` without its ``can_cache`` filter), with those it
    was rebuilt with (a loaded library's final module is empty)."""
    from numba.core.environment import lookup_environment

    found = {environment.env_name: environment for environment in cres.referenced_envs or ()}
    for variable in cres.library._final_module.global_variables:
        if variable.name.startswith(ENVIRONMENT_GLOBAL_PREFIX) and variable.name not in found:
            environment = lookup_environment(variable.name)
            if environment is not None:
                found[variable.name] = environment
    return tuple(found.values())


def inspectable(library) -> bool:
    """Whether numba can give `library`'s code as LLVM IR: not for code it loaded from its
    own cache (``CodeLibrary._disable_inspection``), whose ``get_llvm_str`` warns and
    returns text that is not the code."""
    return not library._disable_inspection


def rebuild_compile_result(target_context, reduced: tuple, load_library=None,
                           module_stand_in=None):
    """A compile result from :func:`reduce_compile_result`'s data (``CompileResult._rebuild``).

    `load_library(codegen, library_state)`, if given, loads its code library in place of
    numba's ``unserialize_library``; the rest is ``_rebuild``'s own steps. With it,
    `module_stand_in(name)`, if given, may return an object standing for the module of
    that name in the entry point of object-mode code (``get_executable`` imports the
    module only to name it).
    """
    from numba.core.compiler import CompileResult

    if load_library is None:
        return CompileResult._rebuild(target_context, *reduced)
    (library_state, fndesc, environment, signature, objectmode, lifted, typeann, reload_init,
     referenced_envs) = reduced
    for function in reload_init or ():
        function()
    library = load_library(target_context.codegen(), library_state)
    stand_in = (module_stand_in(fndesc.modname)
                if objectmode and module_stand_in is not None else None)
    compiled = CompileResult(
        target_context=target_context, typing_context=target_context.typing_context,
        library=library, environment=environment,
        entry_point=(target_context.get_executable(library, fndesc, environment)
                     if stand_in is None else
                     _executable(target_context, library, fndesc, environment, stand_in)),
        fndesc=fndesc, type_annotation=typeann, signature=signature, objectmode=objectmode,
        lifted=lifted, typing_error=None, call_helper=None, metadata=None,
        reload_init=reload_init, referenced_envs=referenced_envs)
    for referenced in referenced_envs:
        library.codegen.set_env(referenced.env_name, referenced)
    return compiled


def _executable(target_context, library, fndesc, environment, module):
    """``CPUContext.get_executable``, naming `module` as the function's module."""
    from numba import _dynfunc

    pointer = library.get_pointer_to_function(fndesc.llvm_cpython_wrapper_name)
    function = _dynfunc.make_function(module, fndesc.qualname.split(".")[-1],
                                      f"compiled wrapper for {fndesc.qualname!r}", pointer,
                                      environment, (library,))
    library.codegen.set_env(target_context.get_env_name(fndesc), environment)
    return function


def module_for_linking(library):
    """The module a compile links `library` in from (``CPUCodeLibrary._get_module_for_linking``)."""
    return library._get_module_for_linking()


def link_as_loaded(library) -> None:
    """From now on, link `library` in from its module for linking as a process loading it
    parses it from bitcode (``CPUCodeLibrary._shared_module``): the same functions, in the
    order and with the attribute groups the bitcode gives them, so what links it in is
    optimised from the same module here as there."""
    import llvmlite.binding as llvm

    library._shared_module = llvm.parse_bitcode(library._get_module_for_linking().as_bitcode())


def load_object_code(library, object_code: bytes, symbols) -> None:
    """Load stored `object_code` as the code of the new `library`, which defines `symbols`,
    as ``CPUCodeLibrary._unserialize`` does but for parsing the module kept for linking
    (``_set_compiled_object``, ``_finalize_final_module``, ``JitEngine._defined_symbols``)."""
    library.enable_object_caching()
    library._set_compiled_object(object_code)
    library._finalize_final_module()
    library.codegen._engine._defined_symbols.update(symbols)


def plain_jit_parts(dispatcher) -> tuple | None:
    """``(py_func, locals, targetoptions)`` of a dispatcher ``numba.njit`` made, compiling with
    numba's own compiler; None for anything else (an ``@overload``'s function, a dispatcher
    of another class or pipeline). A dispatcher made from those parts compiles the same code."""
    from numba.core import compiler
    from numba.core.registry import CPUDispatcher

    if type(dispatcher) is not CPUDispatcher:
        return None
    if getattr(dispatcher._compiler, "pipeline_class", None) is not compiler.Compiler:
        return None
    return dispatcher.py_func, dict(dispatcher.locals), dict(dispatcher.targetoptions)


def dispatcher_cache(dispatcher):
    """The cache object a dispatcher consults before and after compiling (``Dispatcher._cache``)."""
    return dispatcher._cache


def set_dispatcher_cache(dispatcher, cache) -> None:
    dispatcher._cache = cache


def compile_flags(dispatcher):
    """The flags `dispatcher` compiles with if it compiles now: its target options, with
    what they inherit from the compile in progress, its caller's (fastmath, the error
    model...), as ``_FunctionCompiler._compile_core`` makes them."""
    from numba.core import compiler

    flags = compiler.Flags()
    dispatcher.targetdescr.options.parse_as_flags(flags, dispatcher.targetoptions)
    return dispatcher._compiler._customize_flags(flags)


def flag_values(flags) -> dict:
    """Every option of numba's compile `flags` by name (``TargetConfig.options``)."""
    return {name: getattr(flags, name) for name in type(flags).options}


def overload_template_class():
    """The class of numba's templates of ``@overload`` functions and methods, whose
    ``_get_jit_decorator`` gives the decorator making each implementation's dispatcher
    (``_OverloadFunctionTemplate._build_impl``)."""
    from numba.core.typing.templates import _OverloadFunctionTemplate

    return _OverloadFunctionTemplate


def final_module(library):
    """The LLVM module a code library finalizes (``CodeLibrary._final_module``)."""
    return library._final_module


def creates_jit_libraries(codegen) -> bool:
    """Whether `codegen` makes numba's plain JIT code libraries (``codegen._library_class``)."""
    from numba.core.codegen import JITCodeLibrary

    return codegen._library_class is JITCodeLibrary


def block_dispatcher(uuid: str):
    """The object-mode block dispatcher of this process with this uuid, or None
    (``ObjModeLiftedWith._memo``)."""
    from numba.core.dispatcher import ObjModeLiftedWith

    return ObjModeLiftedWith._memo.get(uuid)


def dispatcher_uuid(dispatcher) -> str:
    """The uuid numba pickles a dispatcher by (``_MemoMixin._uuid``)."""
    return dispatcher._uuid


def runtime_initialized() -> bool:
    """Whether numba's runtime (NRT) is initialised in this process (``rtsys._init``)."""
    from numba.core.runtime import rtsys

    return rtsys._init


def compile_runtime_library(target_context):
    """numba's runtime functions compiled as ``nrtdynmod.compile_nrt_functions`` compiles
    them, but keeping their object code, so that the library can be serialized."""
    from numba.core.runtime import nrtdynmod

    module, library = nrtdynmod.create_nrt_module(target_context)
    library.enable_object_caching()
    library.add_ir_module(module)
    library.finalize()
    return library


def initialize_runtime(target_context, make_library) -> None:
    """Initialise numba's runtime (``rtsys.initialize``) with the library of runtime
    functions `make_library(target_context)` returns, instead of numba's compile of it
    (``nrtdynmod.compile_nrt_functions``). numba registers the C helpers those functions
    call before it asks for them, so loaded object code can be resolved."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.runtime import nrtdynmod, rtsys

    with global_compiler_lock:  # no other thread initialises the runtime meanwhile
        numba_compile = nrtdynmod.compile_nrt_functions
        nrtdynmod.compile_nrt_functions = make_library
        try:
            rtsys.initialize(target_context)
        finally:
            nrtdynmod.compile_nrt_functions = numba_compile


def linked_libraries(library) -> list:
    """The code libraries numba links into `library` (``CPUCodeLibrary._linking_libraries``)."""
    return library._linking_libraries


def target_machine(codegen):
    """The LLVM target machine a JIT codegen compiles for (``JITCPUCodegen._tm``)."""
    return codegen._tm


def data_layout(codegen) -> str:
    """The data layout of that target machine (``JITCPUCodegen._data_layout``)."""
    return codegen._data_layout


def call_reusing_slots(context, builder, callee, return_type, argument_types, arguments,
                       slots: dict):
    """The value of a call as numba's ``CPUCallConv.call_function`` makes it, with the slots
    the callee writes its return value and exception into taken from `slots` (one per
    LLVM type, made on first use) rather than new ones at each call: a function of many
    calls keeps a few stack slots, not two a call. A failed call returns its error from
    the calling function (:func:`propagate_unless_ok`). Uses ``_get_arg_packer`` and
    ``excinfo_t``."""
    from llvmlite import ir
    from numba.core import callconv, cgutils, types

    call_conv = context.call_conv
    return_slot_type = call_conv.get_return_type(return_type).pointee
    excinfo_slot_type = ir.PointerType(callconv.excinfo_t)
    for slot_type, name in ((return_slot_type, "retval"), (excinfo_slot_type, "excinfo")):
        if slot_type not in slots:
            slots[slot_type] = cgutils.alloca_once(builder, slot_type, name=name)
    return_slot, excinfo_slot = slots[return_slot_type], slots[excinfo_slot_type]
    if isinstance(return_type, types.Optional | types.NoneType):
        # Only these return without writing the slot (numba's RETCODE_NONE), which
        # must then read as None; a slot read after any other success was written.
        builder.store(cgutils.get_null_value(return_slot_type), return_slot)
    packed = list(call_conv._get_arg_packer(argument_types).as_arguments(builder, arguments))
    code = builder.call(callee, [return_slot, excinfo_slot, *packed])
    propagate_unless_ok(context, builder, code, excinfo_slot)
    value = builder.load(return_slot)
    model = context.data_model_manager[return_type]
    if not (returned_as_held(model) and value.type == model.get_value_type()):
        value = context.get_returned_value(builder, return_type, value)
    return value


def propagate_unless_ok(context, builder, code, excinfo_slot) -> None:
    """Return from the function `builder` is in if a call by numba's calling convention
    reported an error (`code`, the exception info written to `excinfo_slot`), as
    ``CPUCallConv.return_status_propagate`` does after numba's ``_get_return_status``;
    the builder goes on in a new block where the call succeeded.

    numba's reads the call's status in 9 instructions, and propagates it from 4 blocks
    (a third of a large graph kernel's IR, built and printed in Python, then parsed
    and compiled by LLVM); this takes 3 and one block, returning as numba's does:
    ``RETCODE_OK`` and ``RETCODE_NONE`` are success; the caller's exception info gets the
    callee's for a code of ``RETCODE_USEREXC`` or more, else undefined; the code is
    returned. numba does not return inside a try block, which glue never holds. The
    branch to the return is marked unlikely, as numba's ``if_unlikely`` marks it.
    """
    from llvmlite import ir
    from numba.core import callconv

    succeeded = builder.or_(builder.icmp_signed("==", code, callconv.RETCODE_OK),
                            builder.icmp_signed("==", code, callconv.RETCODE_NONE))
    here = builder.block
    after = builder.append_basic_block(f"{here.name}.ok")
    failed = builder.append_basic_block(f"{here.name}.error")
    builder.cbranch(succeeded, after, failed).set_weights([99, 1])
    builder.position_at_end(failed)
    is_user_exception = builder.icmp_signed(">=", code, callconv.RETCODE_USEREXC)
    excinfo = builder.select(is_user_exception, builder.load(excinfo_slot),
                             ir.Constant(ir.PointerType(callconv.excinfo_t), ir.Undefined))
    builder.store(excinfo, context.call_conv._get_excinfo_argument(builder.function))
    context.call_conv._return_errcode_raw(builder, code)
    builder.position_at_end(after)


def returned_as_held(model, conversion: str = "from_return") -> bool:
    """Whether numba's `conversion` of a value of data `model` (``from_return``: a
    returned value to the value held; ``from_data``) gives it back unchanged.

    It does for numbers and pointers, and for tuples and structures of those, arrays
    among them; numba still rebuilds each, member by member: about 20 instructions per
    array a call returns, a quarter of a large graph kernel's IR. Known by the classes
    that implement it, so a model numba changes is converted as numba does."""
    from numba.core.datamodel import models

    implementation = getattr(type(model), conversion)
    if implementation is getattr(models.PrimitiveModel, conversion):
        return True
    if isinstance(model, models.UniTupleModel):
        if conversion == "from_return":  # numba returns a tuple as it holds it
            return implementation is models.UniTupleModel.from_return
        return (implementation is models.UniTupleModel.from_data
                and returned_as_held(model._elem_model, "from_data"))
    if isinstance(model, models.StructModel) and implementation is getattr(
            models.StructModel, conversion):
        return all(returned_as_held(member, "from_data") for member in model._models)
    return False


@contextlib.contextmanager
def lean_refresh(install):
    """Within (in this thread), refreshing numba's contexts installs only what
    `install(target_context)` installs; the typing context installs nothing.

    A process's first full refresh (``BaseContext.refresh`` of the typing and the
    target context, from ``CompilerBase.__init__``, intrinsic typing and
    ``get_function``) imports and installs all of numba's implementations: its
    numpy, math, random, typed containers... about 0.1 s, which a function that
    only calls other functions does not need. :func:`full_refresh` inside restores
    numba's own, for compiles nested in this one. The methods are swapped under
    numba's compiler lock, and put back on exit.
    """
    from numba.core import base
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.typing import context as typing

    with global_compiler_lock:
        typing_refresh, target_refresh = typing.BaseContext.refresh, base.BaseContext.refresh

        def refresh_typing(self):
            if not session.current().this_thread.lean_refresh:
                typing_refresh(self)

        def refresh_target(self):
            if session.current().this_thread.lean_refresh:
                install(self)
            else:
                target_refresh(self)

        typing.BaseContext.refresh, base.BaseContext.refresh = refresh_typing, refresh_target
        this_thread = session.current().this_thread
        was_lean, this_thread.lean_refresh = this_thread.lean_refresh, True
        try:
            yield
        finally:
            this_thread.lean_refresh = was_lean
            typing.BaseContext.refresh, base.BaseContext.refresh = typing_refresh, target_refresh


@contextlib.contextmanager
def full_refresh():
    """numba's own refresh within, inside :func:`lean_refresh` (a nested compile).
    An exception leaving it is counted in :func:`full_refresh_failures`."""
    this_thread = session.current().this_thread
    was_lean, this_thread.lean_refresh = this_thread.lean_refresh, False
    try:
        yield
    except BaseException:
        this_thread.refresh_failures += 1
        raise
    finally:
        this_thread.lean_refresh = was_lean


def refresh_cpu_contexts() -> None:
    """Refresh numba's CPU typing and target contexts as a compile's set-up does
    (``CompilerBase.__init__``), inside a lean refresh too: a process's first such
    refresh installs all of numba's implementations (about 0.07 s)."""
    from numba.core.registry import cpu_target

    with full_refresh():
        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()


def full_refresh_failures() -> int:
    """How many compiles failed in this thread with numba's full refresh in place:
    those did not fail for want of registries."""
    return session.current().this_thread.refresh_failures


def declare_globals(typing_context, values) -> None:
    """Give `typing_context` the types numba registered for those of `values` it
    registered (intrinsics: ``infer_global``, into the typing
    ``templates.builtin_registry``), which a lean refresh (:func:`lean_refresh`)
    does not install."""
    from numba.core.typing import templates

    wanted = {id(value): value for value in values}
    for registered, numba_type in templates.builtin_registry.globals:
        if (wanted.get(id(registered)) is registered
                and typing_context._lookup_global(registered) is None):
            typing_context.insert_global(registered, numba_type)


def reinstall_registries(target_context, *registries) -> None:
    """Install into `target_context` what was registered since in the registries it
    has, then `registries`. numba registers an intrinsic's lowering, when it types
    it, into the first registry its target installed (``_get_target_registry``):
    a refresh must install that one again."""
    for registry in [*target_context._registries, *registries]:
        target_context.install_registry(registry)


def host_architecture() -> str:
    """The architecture numba compiles for, as LLVM's process triple names it."""
    import llvmlite.binding as llvm

    return llvm.get_process_triple().split("-", 1)[0]


def host_cpu_features() -> set[str]:
    """The features this machine's CPU has, as LLVM reads them (``get_host_cpu_features``)."""
    import llvmlite.binding as llvm

    return {name for name, enabled in llvm.get_host_cpu_features().items() if enabled}


def codegen_created() -> bool:
    """Whether numba made its code generator in this process (``CPUTarget.target_context``,
    a cached property): its target machine's CPU is fixed from then on."""
    from numba.core.registry import cpu_target

    return "_toplevel_target_context" in vars(cpu_target)


def codegen_cpu() -> tuple[str | None, str]:
    """The CPU name and features numba's code generator compiles for: the name as numba's
    config holds it (the target machine does not tell), the features it was made with."""
    from numba.core import config
    from numba.core.registry import cpu_target

    return config.CPU_NAME, cpu_target.target_context.codegen()._tm_features


def set_codegen_cpu(name: str, features: str) -> None:
    """Have numba's code generator, when it is made, compile for CPU `name` with `features`
    (numba's ``NUMBA_CPU_NAME`` and ``NUMBA_CPU_FEATURES``, as its config holds them)."""
    from numba.core import config

    config.CPU_NAME, config.CPU_FEATURES = name, features


def ir_global_names(func_ir) -> set[str]:
    """The names of the globals `func_ir`'s code reads (``ir.Global`` values): those
    object-mode code looks up in its environment's globals at run time."""
    from numba.core import ir

    return {instruction.value.name for block in func_ir.blocks.values()
            for instruction in block.find_insts(ir.Assign)
            if isinstance(instruction.value, ir.Global)}


def block_function(dispatcher):
    """The Python function whose ``with objmode`` block `dispatcher` compiles
    (``func_ir.func_id.func``): what numba pickles the block with."""
    return dispatcher.func_ir.func_id.func


def environment_module(environment) -> str | None:
    """The name of the module whose globals `environment` holds (``Environment.globals``)."""
    return environment.globals.get("__name__")


def environment_state(environment) -> tuple:
    """What numba pickles of `environment` besides its module: its constants and name."""
    return environment.consts, environment.env_name


def rebuild_environment(module: str, consts, env_name: str, namespace: dict | None = None):
    """The environment `env_name`, live or rebuilt as numba's ``_rebuild_env`` does: with
    the globals of `module` (imported), or, given, with `namespace` as its globals."""
    from numba.core.environment import Environment, _rebuild_env, lookup_environment

    if namespace is None:
        return _rebuild_env(module, consts, env_name)
    environment = lookup_environment(env_name)
    if environment is not None:
        return environment
    environment = Environment(namespace)
    environment.consts[:] = consts
    environment.env_name = env_name
    Environment._memo[env_name] = environment
    return environment


def replace_unpickle(function) -> None:
    """Have machine code unpickle its pickled constants with `function` (numba's
    ``serialize._numba_unpickle``, which ``_helperlib.c`` looks up once per process, at its
    first unpickle: a replacement made later does not reach machine code)."""
    from numba.core import serialize

    serialize._numba_unpickle = function


def unpickled_memo() -> dict:
    """What machine code unpickled, by (address of the pickle, its sha1): numba's
    ``serialize._unpickled_memo``, which keeps each object alive and unpickled once."""
    from numba.core import serialize

    return serialize._unpickled_memo


def initialize_extensions() -> None:
    """Load numba's extensions (the ``numba_extensions`` entry points), once per process,
    as numba's dispatchers do before their first compile (``entrypoints.init_all``)."""
    from numba.core import entrypoints

    entrypoints.init_all()
