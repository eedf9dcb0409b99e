"""One benchmark process: compile a model in one mode, call it, report figures as JSON.

Usage: python benchmarks/child.py SPEC, SPEC a JSON object with ``function`` and
``kwargs`` (a model of :mod:`numba_cache.evaluation.models`), ``mode`` (a PyTensor mode
name) and the optional measurements ``calls`` (per-call times) and ``keys``
(numba_cache's key computation times).

The process prints ``FIRST_RESULT`` as soon as the function's first call has
returned, so that the parent can time interpreter start to first result, then
one JSON line. The cache in use is whatever the environment points at
(``NBCACHE_DIR``, ``PYTENSOR_FLAGS``); the parent decides whether it is cold.

With ``serve_calls`` in the spec, the process then stays, and times calls on
request: for each line ``call`` or ``call_trusted`` read from stdin, it prints the
microseconds per call of one timed loop (``trust_input`` off or on), until stdin
closes. The parent interleaves such requests across the processes of several
modes, so that all modes are timed in the same minutes (:mod:`.suite`).

Only the ``NUMBA_CACHE`` mode imports numba_cache: the models and the compile
counter are loaded from their files, so no other mode pays for numba_cache's
import.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import time
import timeit
from pathlib import Path

FIRST_RESULT = "FIRST_RESULT"
OURS = "NUMBA_CACHE"
#: timeit repeats per call figure; each repeat runs for at least 0.2 s (``Timer.autorange``).
CALL_REPEATS = 5
#: The call figures a process serving calls times: ``trust_input`` off, then on.
CALL_FIGURES = ("call", "call_trusted")


def _standalone(module: str):
    """Load ``numba_cache.evaluation.<module>`` from its file, without the numba_cache package
    (whose import registers its mode when PyTensor is imported, importing numba)."""
    package = Path(importlib.util.find_spec("numba_cache").origin).parent
    name = f"_benchmark_{module}"
    spec = importlib.util.spec_from_file_location(name, package / "evaluation" / f"{module}.py")
    loaded = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _compile_counter(mode: str):
    """Count numba compiles in the numba modes; the others do not import numba at all.

    Installing the counter imports numba before the timed compile, as importing
    numba_cache does in the ``NUMBA_CACHE`` mode, so the compile windows of all
    numba modes start with numba imported.
    """
    if "NUMBA" not in mode:
        return contextlib.nullcontext(None)
    return _standalone("compile_events").count_numba_compiles()


def _per_call_microseconds(function, point) -> float:
    timer = timeit.Timer(lambda: function(*point))
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=CALL_REPEATS, number=number)) / number * 1e6


def _serve_calls(function, point) -> None:
    """Answer each ``call`` or ``call_trusted`` line of stdin with the microseconds per
    call of one loop of ``timeit``, its length auto-ranged (>= 0.2 s) on the first request."""
    timer = timeit.Timer(lambda: function(*point))
    loops = {}
    for request in sys.stdin:
        figure = request.strip()
        if figure not in CALL_FIGURES:
            raise ValueError(f"unknown request {figure!r}: expected one of {CALL_FIGURES}")
        function.trust_input = figure == "call_trusted"
        if figure not in loops:
            loops[figure], _ = timer.autorange()
        print(timer.timeit(number=loops[figure]) / loops[figure] * 1e6, flush=True)


def _memory_bytes(field: str) -> int | None:
    """A figure of this process's memory from ``/proc/self/status`` (``VmRSS``: resident
    now; ``VmHWM``: the peak so far), or None where there is no such file."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _beside(module: str):
    """Load the benchmark module `module` from this file's folder (this process runs
    as a script, without the ``benchmarks`` package)."""
    name = f"_benchmark_{module}"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{module}.py"))
    loaded = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _key_milliseconds(model, function) -> dict:
    """Time numba_cache's two keys of `model`'s graph, as a warm compile computes them.

    The pre-rewrite key is computed on the graph as ``pytensor.function``
    prepares it before rewriting; the graph kernel key on the rewritten graph of
    `function`. `rewrite_key_stored` checks that the timed key is the one this
    process's compile looked up.
    """
    from pytensor.compile.maker import FunctionMaker
    from pytensor.compile.mode import get_mode
    from pytensor.compile.rebuild import construct_function_ins_and_outs

    from numba_cache.rewritten.rewrite_cache import RewriteLookup
    from numba_cache.kernels.context import current_context
    from numba_cache.keys.kernels import graph_kernel_key

    context = current_context()
    inputs, outputs = construct_function_ins_and_outs(model.inputs, model.outputs)
    outputs = [FunctionMaker.wrap_out(output) for output in outputs]
    fgraph, _ = FunctionMaker.create_fgraph(inputs, outputs)
    begin = time.perf_counter()
    mode = get_mode(OURS)
    key = RewriteLookup(context, fgraph, inputs, outputs, mode).first_key
    middle = time.perf_counter()
    graph_kernel_key(function.maker.fgraph, context.fingerprint)
    end = time.perf_counter()
    stored = context.store.read(context.fingerprint.digest, key.digest)
    return {
        "rewrite_key_ms": (middle - begin) * 1e3,
        "graph_key_ms": (end - middle) * 1e3,
        "rewrite_key_stored": stored is not None,
    }


def main(spec: dict) -> None:
    """Compile, call and report as `spec` asks; then serve call timings if it asks so."""
    report, function, point = compile_and_measure(spec)
    print(json.dumps(report), flush=True)
    if spec.get("serve_calls"):
        _serve_calls(function, point)


def compile_and_measure(spec: dict) -> tuple[dict, object, list]:
    """The report of `spec`'s compile and measurements, the compiled function and its inputs."""
    import numpy as np
    import pytensor

    models = _standalone("models")
    if spec["mode"] == OURS:
        import numba_cache  # noqa: F401  (registers the mode)

    model = getattr(models, spec["function"])(**spec["kwargs"])
    resident_before = _memory_bytes("VmRSS")
    with (_beside("descendants_memory").watch() as descendants,
          _compile_counter(spec["mode"]) as compiles):
        begin = time.perf_counter()
        function = pytensor.function(model.inputs, model.outputs, mode=spec["mode"])
        outputs = function(*model.point)
        compile_seconds = time.perf_counter() - begin
    peak = _memory_bytes("VmHWM")
    print(FIRST_RESULT, flush=True)

    report = {
        "compile_seconds": compile_seconds,
        "numba_compiles": None if compiles is None else len(compiles),
        "nodes": len(function.maker.fgraph.apply_nodes),
        "outputs": [np.asarray(output).tolist() for output in outputs],
        "numba_cache_imported": "numba_cache" in sys.modules,
        "numba_cache_package": str(Path(importlib.util.find_spec("numba_cache").origin).parent),
        "peak_rss_bytes": peak,
        "compile_rss_bytes": None if peak is None else peak - resident_before,
        "helper_rss_bytes": descendants["peak_bytes"],
    }
    if spec.get("calls"):
        report["call_us"] = _per_call_microseconds(function, model.point)
        function.trust_input = True
        report["call_trusted_us"] = _per_call_microseconds(function, model.point)
    if spec.get("keys"):
        report |= _key_milliseconds(model, function)
    if spec["mode"] == OURS:
        import numba_cache

        report["cache_events"] = dict(numba_cache.session_stats())
    return report, function, model.point


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
