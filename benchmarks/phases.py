"""Where one compile's time goes: rewriting, op conversion, keys, op loads, numba's glue.

Usage: python benchmarks/phases.py FUNCTION [KWARGS] [--mode MODE] [--json]
       python benchmarks/phases.py --models [--json]

Compiles ``numba_cache.evaluation.models.FUNCTION(**KWARGS)`` once in this process
(KWARGS a Python dict literal) against the store and PyTensor cache the
environment names, and prints the time of each phase, measured by wrapping the
functions that do it (inclusive times, a call within another of the same phase
counted once; a phase nested in another is listed under it), with its share of
the compile; and, whichever phase they fall in, the modules imported for the first
time (PyTensor's numba dispatch and its sparse module on rows of their own) and
the full garbage collections. Run it after filling a store to see what a warm,
variant or new-model compile spends.

With ``--models``, every benchmark model (:data:`benchmarks.suite.MODELS`) is
compiled in fresh processes on caches of its own, in the benchmark's order: cold,
warm, then the new model and each structural edit on the caches as the warm step
left them; one table per model gives each phase's share of each step
(``--output PHASES.md`` writes them with the machine and commit measured on).

The wrapping costs a few microseconds a call: figures for comparison between
modes come from ``benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import ast
import functools
import gc
import importlib.machinery
import inspect
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: (phase, module, attribute path): what is timed, all inclusive.
PHASES = (
    ("rewrite cache: lookup, keys and (on a miss) rewriting", "numba_cache.rewritten.rewrite_cache",
     "CachedRewriteFunctionMaker.prepare_fgraph"),
    ("  PyTensor's graph rewrites", "pytensor.compile.maker", "FunctionMaker.prepare_fgraph"),
    ("    inplace checks (PyTensor's DestroyHandler validating each replacement)",
     "pytensor.graph.destroyhandler", "DestroyHandler.on_validate"),
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


#: Timed by the collector's callbacks rather than by wrapping: it falls in any phase.
FULL_COLLECTIONS = "full garbage collections (whichever phase they fall in)"
#: Timed by an import hook (:class:`_TimedImports`), in whichever phase they fall.
IMPORTS = "modules first imported (whichever phase they fall in)"
#: (phase, module): imports of their own rows, nested under :data:`IMPORTS`.
IMPORTED = (
    ("  PyTensor's numba dispatch", "pytensor.link.numba.dispatch"),
    ("  PyTensor's sparse module (and scipy.sparse)", "pytensor.sparse"),
)


def _wrap(totals: dict, counts: dict, phase: str, module_name: str, path: str) -> None:
    import importlib

    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = getattr(owner, name)
    active = [0]  # a call inside another of the same phase (a nested compile) is in its time

    @functools.wraps(original)
    def timed(*args, **kwargs):
        begin = time.perf_counter()
        active[0] += 1
        try:
            return original(*args, **kwargs)
        finally:
            active[0] -= 1
            if not active[0]:
                totals[phase] += time.perf_counter() - begin
            counts[phase] += 1

    static = isinstance(inspect.getattr_static(owner, name), staticmethod)
    setattr(owner, name, staticmethod(timed) if static else timed)


def measure(function_name: str, kwargs: dict, mode: str) -> dict:
    """Compile and call one model in this process: its total time, and each phase's time
    and number of calls (phases that did not run are left out)."""
    import pytensor

    import numba_cache
    from numba_cache.evaluation import models

    model = getattr(models, function_name)(**kwargs)
    totals, counts = defaultdict(float), defaultdict(int)
    for phase, module_name, path in PHASES:
        _wrap(totals, counts, phase, module_name, path)
    timer = functools.partial(_time_full_collections, totals, counts, [])
    gc.callbacks.append(timer)
    imports = _TimedImports(totals, counts)
    sys.meta_path.insert(0, imports)
    begin = time.perf_counter()
    try:
        function = pytensor.function(model.inputs, model.outputs, mode=mode)
        function(*model.point)
        total = time.perf_counter() - begin
    finally:
        sys.meta_path.remove(imports)
        gc.callbacks.remove(timer)
    return {"seconds": total,
            "phases": {phase.strip(): {"seconds": totals[phase], "calls": counts[phase],
                                       "depth": _depth(phase)}
                       for phase in _rows() if counts[phase]},
            "counters": dict(numba_cache.session_stats())}


def _time_full_collections(totals: dict, counts: dict, started: list, event: str,
                           info: dict) -> None:
    if info["generation"] != 2:
        return
    if event == "start":
        started.append(time.perf_counter())
    else:
        totals[FULL_COLLECTIONS] += time.perf_counter() - started.pop()
        counts[FULL_COLLECTIONS] += 1


_FILE_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader,
                 importlib.machinery.ExtensionFileLoader)


class _TimedImports:
    """A finder first on ``sys.meta_path`` that times each module's first import: the
    outermost as :data:`IMPORTS`, those named in :data:`IMPORTED` as their own rows.

    It finds nothing itself: it asks the finders after it and times the loader of
    the spec they find, when that loader serves one module (a file loader): the
    timing is an attribute of that object, whose class stays what it was."""

    def __init__(self, totals: dict, counts: dict):
        self._totals, self._counts = totals, counts
        self._depth = 0
        self._named = {module: phase for phase, module in IMPORTED}

    def find_spec(self, fullname, path, target=None):
        following = sys.meta_path[sys.meta_path.index(self) + 1:]
        for finder in following:
            find = getattr(finder, "find_spec", None)
            spec = None if find is None else find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if isinstance(spec.loader, _FILE_LOADERS):
            exec_module = spec.loader.exec_module
            spec.loader.exec_module = functools.partial(self._timed, fullname, exec_module)
        return spec

    def _timed(self, fullname: str, exec_module, module) -> None:
        begin = time.perf_counter()
        self._depth += 1
        try:
            exec_module(module)
        finally:
            self._depth -= 1
            seconds = time.perf_counter() - begin
            if not self._depth:
                self._totals[IMPORTS] += seconds
                self._counts[IMPORTS] += 1
            if fullname in self._named:
                self._totals[self._named[fullname]] += seconds
                self._counts[self._named[fullname]] += 1


def _rows() -> list[str]:
    return [phase for phase, _, _ in PHASES] + [IMPORTS, *(phase for phase, _ in IMPORTED),
                                                  FULL_COLLECTIONS]


def _depth(phase: str) -> int:
    """How deep `phase` is nested in another, by its indentation in :data:`PHASES`."""
    return (len(phase) - len(phase.lstrip())) // 2


def every_model() -> dict:
    """Each benchmark model's steps measured in fresh processes: {model: {step: measure}}."""
    from benchmarks.modes import MODES
    from benchmarks.suite import MODELS

    results = {}
    for model in MODELS.values():
        steps = [("cold", {}), ("warm", {})]
        later = ([("new model", model.new_model)] if model.new_model is not None else [])
        later += [(f"edit: {edit}", {"edit": edit}) for edit in model.edits]
        with tempfile.TemporaryDirectory(prefix="phases-") as directory:
            workdir = Path(directory) / "work"
            environment = MODES["NUMBA_CACHE"].environment(workdir)
            measured = {}
            for step, kwargs in steps:
                measured[step] = _measure_in_child(model.function, kwargs, environment)
            warm_state = Path(directory) / "after-warm"
            shutil.copytree(workdir, warm_state, symlinks=True)
            for step, kwargs in later:  # each after the base alone, as the benchmark
                shutil.rmtree(workdir)
                shutil.copytree(warm_state, workdir, symlinks=True)
                measured[step] = _measure_in_child(model.function, kwargs, environment)
        results[model.name] = measured
        print(f"{model.name}: {', '.join(measured)}", file=sys.stderr, flush=True)
    return results


def _measure_in_child(function_name: str, kwargs: dict, environment: dict) -> dict:
    process = subprocess.run(
        [sys.executable, __file__, function_name, repr(kwargs), "--json"],
        env=environment, capture_output=True, text=True)
    if process.returncode != 0:
        last = [line for line in process.stderr.splitlines() if line.strip()][-1:]
        raise RuntimeError(f"{function_name}({kwargs}) failed: {''.join(last)}")
    return json.loads(process.stdout.splitlines()[-1])


def _share_table(measured: dict) -> list[str]:
    """One row per phase that ran in any step, one column per step: seconds and share."""
    steps = list(measured)
    width = max(len(phase) for phase in _rows())
    lines = ["  " + "phase".ljust(width) + "".join(f"  {step[:16]:>16}" for step in steps),
             "  " + "total (pytensor.function and first call)".ljust(width)
             + "".join(f"  {measured[step]['seconds']:>14.3f} s" for step in steps)]
    for phase in _rows():
        if not any(phase.strip() in measured[step]["phases"] for step in steps):
            continue
        cells = []
        for step in steps:
            found = measured[step]["phases"].get(phase.strip())
            cells.append("—" if found is None else
                         f"{found['seconds']:.3f} {found['seconds'] / measured[step]['seconds']:4.0%}")
        lines.append("  " + phase.ljust(width) + "".join(f"  {cell:>16}" for cell in cells))
    return lines


def _document(tables: str) -> str:
    """The tables of :func:`every_model` as a page, with what they were measured on."""
    from benchmarks.run import machine

    measured_on = machine()
    versions = ", ".join(f"{name} {version}" for name, version in measured_on["versions"].items())
    return (f"# Where each compile's time goes\n\n"
            f"Made by `python benchmarks/phases.py --models --output benchmarks/PHASES.md` "
            f"({measured_on['source']}), on {measured_on['cpu']} ({measured_on['nproc']} cores, "
            f"LLVM CPU `{measured_on['llvm_cpu']}`); {versions}. One fresh process per step; "
            f"inclusive times, a phase nested in another listed under it; figures of one "
            f"run, for the shares, not for comparison between modes (`RESULTS.md`).\n\n"
            f"```\n{tables}\n```\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("function", nargs="?")
    parser.add_argument("kwargs", nargs="?", default="{}")
    parser.add_argument("--mode", default="NUMBA_CACHE")
    parser.add_argument("--models", action="store_true",
                        help="every benchmark model, cold, warm, new model and edits")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--output", type=Path, help="with --models: write the tables there")
    args = parser.parse_args(argv)
    if args.models == (args.function is not None):
        parser.error("name one FUNCTION, or --models")
    if args.output is not None and not args.models:
        parser.error("--output goes with --models")
    if args.models:
        results = every_model()
        if args.json:
            print(json.dumps(results, indent=1))
            return 0
        tables = "\n\n".join(
            f"{name} (seconds, share of the step's compile):\n" + "\n".join(_share_table(measured))
            for name, measured in results.items())
        if args.output is None:
            print(tables)
        else:
            args.output.write_text(_document(tables))
        return 0

    result = measure(args.function, ast.literal_eval(args.kwargs), args.mode)
    if args.json:
        print(json.dumps(result))
        return 0
    total = result["seconds"]
    print(f"{args.function}({args.kwargs}) in {args.mode}: {total:.3f} s "
          f"(pytensor.function and first call)")
    for phase, found in result["phases"].items():
        print(f"  {found['seconds']:7.3f} s  {found['seconds'] / total:4.0%}  "
              f"{found['calls']:5d}x  {'  ' * found['depth']}{phase}")
    print("  counters:", result["counters"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
