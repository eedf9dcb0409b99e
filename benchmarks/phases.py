"""Where one compile's time goes: rewriting, op conversion, keys, op loads, numba's glue.

Usage: python benchmarks/phases.py FUNCTION [KWARGS] [--mode MODE]

Compiles ``numba_cache.evaluation.models.FUNCTION(**KWARGS)`` once in this process
(KWARGS a Python dict literal) against the store and PyTensor cache the
environment names, and prints the time of each phase, measured by wrapping the
functions that do it (inclusive times; a phase nested in another is listed
under it). Run it after filling a store to see what a warm, variant or new-model
compile spends. The wrapping costs a few microseconds a call: figures for
comparison between modes come from ``benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (phase, module, attribute path): what is timed, all inclusive.
PHASES = (
    ("rewrite cache: lookup, keys and (on a miss) rewriting", "numba_cache.rewritten.rewrite_cache",
     "CachedRewriteFunctionMaker.prepare_fgraph"),
    ("  PyTensor's graph rewrites", "pytensor.compile.maker", "FunctionMaker.prepare_fgraph"),
    ("graph kernel: key, source, lookup, conversion on a miss", "numba_cache.kernels.assembly.graph_kernel",
     "graph_kernel"),
    ("  graph kernel key", "numba_cache.kernels.assembly.graph_kernel", "graph_kernel_key"),
    ("  op conversion (PyTensor's numba dispatch)", "numba_cache.kernels.assembly.conversion", "_funcify"),
    ("  op kernel keys", "numba_cache.kernels.assembly.conversion", "op_kernel_key"),
    ("first call: numba compiles or loads the graph kernel", "numba.core.dispatcher",
     "_DispatcherBase._compile_for_args"),
    ("  op kernels loaded for a graph kernel", "numba_cache.kernels.assembly.op_links", "meet"),
    ("  kernel loads from the store (all kinds)", "numba_cache.kernels.protocol.lookup", "rebuild"),
    ("  numba: compiler set-up (a process's first loads numba's registries)",
     "numba.core.compiler", "CompilerBase.__init__"),
    ("  numba: type inference (nested compiles included)", "numba.core.typed_passes",
     "NopythonTypeInference.run_pass"),
    ("  numba: lowering, LLVM and code generation", "numba.core.typed_passes",
     "NativeLowering.run_pass"),
    ("    LLVM: function optimisation", "numba.core.codegen", "CPUCodeLibrary._optimize_functions"),
    ("    LLVM: module optimisation", "numba.core.codegen",
     "CPUCodeLibrary._optimize_final_module"),
    ("    LLVM: machine code", "numba.core.codegen", "JITCodeLibrary._finalize_specific"),
)


def _wrap(totals: dict, counts: dict, phase: str, module_name: str, path: str) -> None:
    import importlib

    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[phase] += time.perf_counter() - begin
            counts[phase] += 1

    static = isinstance(inspect.getattr_static(owner, name), staticmethod)
    setattr(owner, name, staticmethod(timed) if static else timed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("function")
    parser.add_argument("kwargs", nargs="?", default="{}")
    parser.add_argument("--mode", default="NUMBA_CACHE")
    args = parser.parse_args(argv)

    import pytensor

    import numba_cache
    from numba_cache.evaluation import models

    model = getattr(models, args.function)(**ast.literal_eval(args.kwargs))
    totals, counts = defaultdict(float), defaultdict(int)
    for phase, module_name, path in PHASES:
        _wrap(totals, counts, phase, module_name, path)
    begin = time.perf_counter()
    function = pytensor.function(model.inputs, model.outputs, mode=args.mode)
    function(*model.point)
    total = time.perf_counter() - begin
    print(f"{args.function}({args.kwargs}) in {args.mode}: {total:.3f} s "
          f"(pytensor.function and first call)")
    for phase, _, _ in PHASES:
        if counts[phase]:
            print(f"  {totals[phase]:7.3f} s  {counts[phase]:5d}x  {phase}")
    print("  counters:", dict(numba_cache.session_stats()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
