"""Kernels whose machine code calls only its own copies of the functions it links.

Why a cold process used to get other bits than a warm one (on some CPU targets):
numba links every callee's optimised module into the caller as ``linkonce_odr``
copies and optimises the caller again; calls the optimiser does not inline stay
calls to those copies, which the object file carries as *weak* symbols. When
MCJIT loads an object, a weak symbol that the process already defines binds to
that definition. In the process that compiled a kernel, every callee was itself
compiled and loaded first (strong symbols, optimised once, in their own module),
so the kernel's calls run the callees' code; a later process loads the kernel
alone, so the same calls run the kernel's own copies, optimised a second time
with the caller. Both are valid code for the same function, but where the second
optimisation vectorises or reassociates a reduction differently (LLVM's cost
models for ``znver3``/``znver4`` do; ``generic`` and ``skylake-avx512`` happen
not to), the sums differ in their last bits.

A kernel numba_cache compiles therefore gives those copies internal linkage once
its module is optimised: the code is unchanged, but its calls can no longer be
bound to anything else in the process, so the cold process runs exactly the
object code it stores and every later process loads. :func:`is_self_contained`
checks the result before an entry is written; a kernel that is not (if numba
ever stops honouring the hook) is compiled fresh rather than stored.

This touches numba internals in one place: the compiler pipeline's ``library``
slot and ``CPUCodeLibrary._optimize_final_module``. ``tests/test_cpu_targets.py``
fails loudly if either moves.
"""

from __future__ import annotations

import llvmlite.binding as llvm
from numba.core.codegen import JITCodeLibrary
from numba.core.compiler import Compiler

from numba_cache._compat import numba_internals
from numba_cache.kernels.protocol.ir_digest import graph_function_name, ir_digest

_REPLACEABLE = (llvm.Linkage.linkonce_odr, llvm.Linkage.linkonce_any,
                llvm.Linkage.weak_odr, llvm.Linkage.weak_any)


class SelfContainedLibrary(JITCodeLibrary):
    """numba's JIT code library, with its linked-in copies made internal after optimisation.

    `digest_before_module_passes` is the digest of its code as the module passes
    find it (:mod:`.ir_digest`): what they make of the copies of numba's functions
    it links, and inline, follows what its process compiled before.
    """

    digest_before_module_passes: str | None = None

    def _optimize_final_module(self):
        self.digest_before_module_passes = ir_digest(
            str(self._final_module), graph_function_name(self.name))
        super()._optimize_final_module()
        self._internalize_copies()

    def _internalize_copies(self):
        for function in self._final_module.functions:
            if not function.is_declaration and function.linkage in _REPLACEABLE:
                function.linkage = llvm.Linkage.internal


class SelfContainedCompiler(Compiler):
    """numba's default compiler, lowering into a :class:`SelfContainedLibrary`."""

    library_class = SelfContainedLibrary

    def compile_extra(self, func):
        numba_internals.initialize_extensions()  # see .dispatcher.CachedDispatcher
        if self.state.library is None:
            codegen = self.state.targetctx.codegen()
            if numba_internals.creates_jit_libraries(codegen):
                library = self.library_class(codegen, func.__qualname__)
                # As numba's NativeLowering does for the libraries it creates.
                library.enable_object_caching()
                self.state.library = library
        return super().compile_extra(func)


def is_self_contained(library) -> bool:
    """True if no function `library` defines can be replaced by another module's definition."""
    return not any(
        not function.is_declaration and function.linkage in _REPLACEABLE
        for function in numba_internals.final_module(library).functions
    )
