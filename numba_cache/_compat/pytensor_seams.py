"""PyTensor's private API that numba_cache uses, each with the check that it is still there.

Each check looks at PyTensor as installed; see :mod:`numba_cache._compat`.
"""

from __future__ import annotations

import inspect

from numba_cache._compat import destroy_handler_cycles, require, seam, tensor_constant_data
from numba_cache._compat.pytensor_internals import CONSTANT_FOLDING, REWRITE_FAILURE_LOGGER

__all__ = ["destroy_handler_cycles", "tensor_constant_data"]  # their seams register on import

WRITTEN_FOR = ("3.3",)


@seam("compile.mode names", "pytensor", WRITTEN_FOR, "integration/activation.py")
def mode_names() -> None:
    from pytensor.compile import mode as mode_module
    from pytensor.link.numba.linker import NumbaLinker

    require(isinstance(mode_module.predefined_linkers.get("numba"), NumbaLinker),
            "predefined_linkers['numba'] is not a NumbaLinker")
    require(mode_module.predefined_modes.get("NUMBA") is vars(mode_module).get("NUMBA"),
            "predefined_modes['NUMBA'] is not the module's NUMBA")
    require("numba" in mode_module.fast_run_linkers_to_mode, "fast_run_linkers_to_mode lost 'numba'")
    require(isinstance(getattr(mode_module, "_CACHED_RUNTIME_MODES", None), dict),
            "_CACHED_RUNTIME_MODES is gone")


@seam("Mode.function_maker", "pytensor", WRITTEN_FOR, "integration/linker.py")
def function_maker() -> None:
    from pytensor.compile import maker
    from pytensor.compile.mode import Mode

    require(isinstance(Mode.__dict__.get("function_maker"), property),
            "Mode.function_maker is no longer a property")
    require("mode.function_maker(" in inspect.getsource(maker),
            "pytensor.function no longer builds through mode.function_maker")


@seam("NumbaLinker hooks", "pytensor", WRITTEN_FOR, "integration/linker.py")
def numba_linker() -> None:
    from pytensor.link.numba.linker import NumbaLinker

    for name in ("fgraph_convert", "jit_compile", "create_thunk_inputs", "create_jitable_thunk"):
        require(callable(getattr(NumbaLinker, name, None)), f"NumbaLinker.{name} is gone")


@seam("rewrite failures logged", "pytensor", WRITTEN_FOR, "rewritten/rewrite_failures.py")
def rewrite_failures_logged() -> None:
    from pytensor.graph.rewriting import basic

    require(getattr(getattr(basic, "_logger", None), "name", None) == REWRITE_FAILURE_LOGGER,
            f"the rewriters no longer log on {REWRITE_FAILURE_LOGGER}")
    for callback in (basic.SequentialGraphRewriter.warn, basic.NodeProcessingGraphRewriter.warn):
        require("_logger.error" in inspect.getsource(callback),
                f"{callback.__qualname__} no longer logs a failed rewrite")


@seam("constant folding's local 'node'", "pytensor", WRITTEN_FOR, "rewritten/data_reads.py")
def constant_folding_node() -> None:
    from pytensor.tensor.rewriting import basic

    module, _, name = CONSTANT_FOLDING.rpartition(".")
    require(module == basic.__name__ and hasattr(basic, name), f"{CONSTANT_FOLDING} is gone")
    function = getattr(basic, name)
    code = getattr(function, "__wrapped__", function)
    code = getattr(code, "transform", code)
    require("node" in code.__code__.co_varnames, f"{CONSTANT_FOLDING} has no local 'node'")


@seam("Mode._optimizer", "pytensor", WRITTEN_FOR, "keys/rewrites.py")
def mode_optimizer() -> None:
    from pytensor.compile.mode import Mode
    from pytensor.graph.rewriting.db import RewriteDatabaseQuery

    from numba_cache._compat.pytensor_internals import mode_query

    kept = mode_query(Mode(linker="py", optimizer=RewriteDatabaseQuery(include=["fast_run"])))
    require(isinstance(kept, RewriteDatabaseQuery) and "fast_run" in kept.include,
            "Mode no longer keeps its query in _optimizer")
