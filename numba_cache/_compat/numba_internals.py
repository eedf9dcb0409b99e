"""numba's private API, as plain functions: the rest of numba_cache reaches numba's
internals only through these (and the patches beside them in this package).

Each is checked by a seam of :mod:`.numba_seams`.
"""

from __future__ import annotations


def reduce_compile_result(cres) -> tuple:
    """What numba's own cache pickles of a compile result (``CompileResult._reduce``)."""
    return cres._reduce()


def rebuild_compile_result(target_context, reduced: tuple):
    """A compile result from :func:`reduce_compile_result`'s data (``CompileResult._rebuild``)."""
    from numba.core.compiler import CompileResult

    return CompileResult._rebuild(target_context, *reduced)


def dispatcher_cache(dispatcher):
    """The cache object a dispatcher consults before and after compiling (``Dispatcher._cache``)."""
    return dispatcher._cache


def set_dispatcher_cache(dispatcher, cache) -> None:
    dispatcher._cache = cache


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
