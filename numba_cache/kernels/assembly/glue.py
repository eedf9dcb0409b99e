"""A short LLVM pipeline for graph kernels that only call op kernels.

A graph kernel whose op kernels are all called by symbol (:mod:`.symbol_calls`)
computes nothing itself: it passes arrays from call to call, counts references
and propagates errors. numba still optimises it as any function, with its full
O3 pipeline twice over (function passes, then module passes) on one function of
as many calls as the graph has nodes: on the large benchmark model (about 1,000
calls) 3.5 s of function passes and 1.3 s of module passes, of a glue compile
of 11 s. A :class:`GlueLibrary` runs SROA, instcombine, simplifycfg and numba's
reference-count pruning instead (0.8 s there), and its machine code takes the
same time per call (``benchmarks/``). The op kernels' code is untouched, so
results are the same bits.

When anything besides numba's runtime functions is linked into the library (an
uncacheable op kernel, every op kernel under ``link_op_kernels``), there is
code to optimise: it runs numba's pipeline.

numba internals used: ``CPUCodeLibrary._optimize_functions`` and
``_optimize_final_module`` (overridden, as :mod:`.self_contained` does), the
library's linked libraries and the codegen's target machine and data layout;
the contexts' ``refresh``, ``_registries`` and the typing registry's globals for
:class:`GlueCompiler`'s lean registries (:mod:`numba_cache._compat.numba_internals`).
"""

from __future__ import annotations

import llvmlite.binding as llvm
from numba.core.runtime import rtsys

from numba_cache._compat import numba_internals
from numba_cache.kernels.protocol.self_contained import SelfContainedCompiler, SelfContainedLibrary
from numba_cache.logs import logger


class GlueLibrary(SelfContainedLibrary):
    """A self-contained library optimised lightly when it links only numba's runtime.

    `optimised_lightly` tells whether its final module went through the light
    pipeline (for the seam check).
    """

    optimised_lightly = False

    def only_calls(self) -> bool:
        """Whether nothing but numba's runtime functions is linked in."""
        return all(library is rtsys.library
                   for library in numba_internals.linked_libraries(self))

    def _optimize_functions(self, ll_module):
        if not self.only_calls():
            super()._optimize_functions(ll_module)
            return
        ll_module.data_layout = numba_internals.data_layout(self._codegen)
        for function in ll_module.functions:
            if not function.is_declaration:
                passes, builder = self._passes(llvm.create_new_function_pass_manager())
                passes.add_sroa_pass()
                passes.add_instruction_combine_pass()
                passes.add_simplify_cfg_pass()
                passes.add_refprune_pass()
                passes.run(function, builder)

    def _optimize_final_module(self):
        if not self.only_calls():
            super()._optimize_final_module()
            return
        passes, builder = self._passes(llvm.create_new_module_pass_manager())
        passes.add_refprune_pass()
        passes.run(self._final_module, builder)
        self._internalize_copies()
        self.optimised_lightly = True

    def _passes(self, manager):
        tuning = llvm.create_pipeline_tuning_options(speed_level=1)
        target_machine = numba_internals.target_machine(self._codegen)
        return manager, llvm.create_pass_builder(target_machine, tuning)


class GlueCompiler(SelfContainedCompiler):
    """numba's default compiler, lowering into a :class:`GlueLibrary`, with numba's
    registries installed only as far as a graph function needs them.

    A process's first compile installs all of numba's implementations (about 0.1 s
    of a variant's 0.6 s); the graph function, which only calls, types with none of
    them and lowers with numba's builtin ones and its boxing
    (:func:`numba_internals.lean_refresh`). Op kernels compiled while it is typed
    get numba's full refresh (:func:`numba_internals.full_refresh`, in
    :mod:`.graph_kernel`). Should the lean compile fail (a constant whose lowering lives
    elsewhere), it is compiled again after numba's full refresh: `full_refreshes`
    counts those, `lean_compiles` the others. A failure of an op kernel's own
    compile is raised as it is: it had numba's registries.
    """

    library_class = GlueLibrary
    lean_compiles = 0
    full_refreshes = 0

    def __init__(self, typing_context, target_context, *arguments):
        self._arguments = (typing_context, target_context, *arguments)
        with numba_internals.lean_refresh(_install_for_calls):
            super().__init__(typing_context, target_context, *arguments)

    def compile_extra(self, func):
        failed_before = numba_internals.full_refresh_failures()
        try:
            with numba_internals.lean_refresh(_install_for_calls):
                numba_internals.declare_globals(self.state.typingctx, _globals_read(func))
                result = super().compile_extra(func)
        except Exception as exc:  # compiled with numba's registries, as numba would
            if numba_internals.full_refresh_failures() != failed_before:
                raise  # an op kernel's own compile failed: numba's registries were in place
            logger.info("numba_cache compiles a graph function with all of numba's "
                        "registries: %r", exc)
            GlueCompiler.full_refreshes += 1
            super().__init__(*self._arguments)
            return super().compile_extra(func)
        GlueCompiler.lean_compiles += 1
        return result


def _install_for_calls(target_context) -> None:
    """What lowering a graph function takes: numba's runtime, its builtin lowering
    registry with the constants the body embeds (numbers, arrays, tuples), and
    boxing for its Python wrapper; importing those modules registers them."""
    from numba.core import boxing  # noqa: F401
    from numba.core.imputils import builtin_registry
    from numba.cpython import numbers, tupleobj  # noqa: F401
    from numba.np import arrayobj  # noqa: F401

    rtsys.initialize(target_context)
    numba_internals.reinstall_registries(target_context, builtin_registry)


def _globals_read(function) -> list:
    """The values of the globals and closure variables `function` reads (the intrinsic
    it calls among them)."""
    namespace = function.__globals__
    cells = function.__closure__ or ()
    return [*(namespace[name] for name in function.__code__.co_names if name in namespace),
            *(cell.cell_contents for cell in cells)]
