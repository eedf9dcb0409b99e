"""The PyTensor linker and mode that compile through numba_cache.

``NumbaCacheLinker`` is PyTensor's numba linker with one change: a graph turns
into a cached whole-graph kernel (:func:`numba_cache.kernels.assembly.graph_kernel.graph_kernel`)
instead of a freshly converted one. It takes PyTensor's numba rewrites as they
are, so ``NUMBA_CACHE`` computes exactly what ``NUMBA`` computes.

It subclasses ``NumbaLinker`` because PyTensor picks backend-specific inner-graph
rewrites by the linker's class (``functools.singledispatch`` on it: Scan inner
graphs, ScipyWrapperOp inner graphs, OpFromGraph). As a bare ``JITLinker`` (a
``PerformLinker`` subclass) it got the C/VM variants: a Scan inner graph was
baked without the numba inplace (a scalar Scan step allocated four more arrays
per iteration, AR(1) calls were 1.23x ``NUMBA``'s time) and without the
boundary deep copies numba's Scan relies on.
"""

from __future__ import annotations

from collections.abc import Callable

from pytensor.compile.mode import (
    Mode,
    predefined_linkers,
    predefined_modes,
    register_linker,
    register_mode,
)
from pytensor.graph.rewriting.db import RewriteDatabaseQuery
from pytensor.link.numba.linker import NumbaLinker
from pytensor.link.utils import raise_with_op

from numba_cache import session
from numba_cache._compat import numba_unique_ids
from numba_cache.collector import older_objects_frozen
from numba_cache.codegen.thunk import direct_thunk
from numba_cache.integration import nutpie
from numba_cache.kernels.callbacks import cfunc
from numba_cache.kernels.protocol import overload_cache
from numba_cache.kernels.runtime import objmode
from numba_cache.kernels.outcomes import replaced_numba
from numba_cache.kernels.callbacks.entry_point import entry_point

MODE_NAME = "NUMBA_CACHE"
LINKER_NAME = "numba_cache"



def observe_graph_kernels(observer: Callable) -> None:
    """Call ``observer(fgraph, kernel, storage_map)`` for every graph kernel a linker builds
    from now on: ``numba-cache warm`` compiles the kernels of functions that were built but
    never called."""
    session.current().graph_kernel_observers.append(observer)


class NumbaCacheLinker(NumbaLinker):
    """A JIT linker whose numba kernels are loaded from and saved to numba_cache's store.

    While numba's compiler is replaced by test doubles
    (:mod:`numba_cache.kernels.outcomes.replaced_numba`), it links as PyTensor's ``NumbaLinker``
    does, uncached.
    """

    _numba_replaced = False

    def fgraph_convert(self, fgraph, storage_map=None, **kwargs):
        if self._numba_replaced:
            return super().fgraph_convert(fgraph, storage_map=storage_map, **kwargs)
        from numba_cache.kernels.context import current_context
        from numba_cache.kernels.assembly.graph_kernel import graph_kernel

        state = session.current()
        # The rewrite cache's, if it restored or stored this graph (:mod:`.rewrite_cache`).
        known = state.known_graph_kernels.get(fgraph)
        with older_objects_frozen():
            context = current_context()
            with context.store.bookkeeping_together():
                kernel = graph_kernel(fgraph, context, storage_map, known=known)
        self._hidden_values = kernel.hidden_values
        for observer in state.graph_kernel_observers:
            observer(fgraph, kernel, storage_map or {})
        return kernel

    def jit_compile(self, kernel):
        if self._numba_replaced:
            return super().jit_compile(kernel)
        return kernel.dispatcher

    def create_thunk_inputs(self, storage_map):
        if self._numba_replaced:
            return super().create_thunk_inputs(storage_map)
        # Large constants travel as trailing arguments (numba_cache.keys.constants).
        inputs = [storage_map[variable] for variable in self.fgraph.inputs]
        return inputs + [[value] for value in self._hidden_values]

    def create_jitable_thunk(self, compute_map, order, input_storage, output_storage, storage_map):
        """PyTensor's thunk, replaced by a generated one that calls the kernel directly.

        The jitted function handed out (``Function.vm.jit_fn``) takes the graph's
        inputs, as PyTensor's does: an entry point calling the kernel by symbol.
        """
        self._numba_replaced = replaced_numba.replaced() is not None
        thunks, output_nodes, kernel = super().create_jitable_thunk(
            compute_map, order, input_storage, output_storage, storage_map
        )
        if self._numba_replaced:
            return thunks, output_nodes, kernel
        entry = entry_point(kernel, len(self.fgraph.inputs), self._hidden_values)
        [generic] = thunks
        if not generic.outputs:
            return thunks, output_nodes, entry

        def failed():
            raise_with_op(self.fgraph, output_nodes[0], thunk)

        input_cells = [storage_map[variable] for variable in self.fgraph.inputs]
        thunk = direct_thunk(kernel, input_cells, self._hidden_values, generic.outputs, failed)
        thunk.inputs, thunk.outputs, thunk.lazy = generic.inputs, generic.outputs, False
        return [thunk], output_nodes, entry


def numba_cache_mode() -> Mode:
    """A new mode with numba_cache's linker and PyTensor's numba rewrites."""
    return Mode(NumbaCacheLinker(), RewriteDatabaseQuery(include=["fast_run", "numba"]))


#: PyTensor's own ``Mode.function_maker`` property, which :func:`install_function_maker` wraps.
PYTENSOR_FUNCTION_MAKER = Mode.function_maker


def install_function_maker() -> None:
    """Make every ``Mode`` with numba_cache's linker use the caching function maker.

    ``Mode.function_maker`` (a property, the seam PyTensor's ``DebugMode`` also
    overrides) picks the ``FunctionMaker`` that rewrites a graph. Wrapping it on
    the class, rather than subclassing ``Mode``, keeps the rewrite level in every
    mode rebuilt around our linker: PyMC's ``Mode(linker=mode.linker,
    optimizer=...)``, ``clone``/``including``/``excluding`` and unpickled modes.
    Modes with any other linker get PyTensor's function maker, unchanged.
    """
    if Mode.__dict__["function_maker"] is PYTENSOR_FUNCTION_MAKER:
        Mode.function_maker = property(_function_maker, doc=PYTENSOR_FUNCTION_MAKER.__doc__)


def _function_maker(mode: Mode):
    if isinstance(mode.linker, NumbaCacheLinker):
        from numba_cache.rewritten.rewrite_cache import CachedRewriteFunctionMaker

        return CachedRewriteFunctionMaker
    return PYTENSOR_FUNCTION_MAKER.fget(mode)


def register() -> None:
    """Register the ``numba_cache`` linker and the ``NUMBA_CACHE`` mode (idempotent)."""
    numba_unique_ids.install()
    objmode.install()
    cfunc.install()
    cfunc.register_recognizer(nutpie.recognize)
    overload_cache.install()
    install_function_maker()
    if LINKER_NAME not in predefined_linkers:
        register_linker(LINKER_NAME, NumbaCacheLinker())
    if MODE_NAME not in predefined_modes:
        register_mode(MODE_NAME, numba_cache_mode())
