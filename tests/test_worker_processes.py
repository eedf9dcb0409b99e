"""Compiled functions travel to spawned workers (as PyMC sends them) and load from the store."""

from __future__ import annotations

from helpers import run_python, without_op_loads

SEND_TO_SPAWNED_WORKER = """
import json, multiprocessing
import cloudpickle
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache

def worker(payload, queue):
    import numba_cache
    from numba_cache.evaluation.compile_events import count_numba_compiles
    with count_numba_compiles() as compiles:
        function = cloudpickle.loads(payload)
        value = function(np.arange(4.0))
    queue.put((float(value), len(compiles), dict(numba_cache.session_stats())))

if __name__ == "__main__":
    x = pt.vector("x")
    function = pytensor.function([x], (pt.exp(x) * 2).sum(), mode="NUMBA_CACHE")
    expected = float(function(np.arange(4.0)))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=worker, args=(cloudpickle.dumps(function), queue))
    process.start()
    value, compiles, stats = queue.get(timeout=300)
    process.join()
    print(json.dumps({"expected": expected, "value": value, "compiles": compiles, "stats": stats}))
"""


def test_cloudpickled_function_loads_from_the_store_in_a_spawned_worker(tmp_path):
    script = tmp_path / "send.py"
    script.write_text(SEND_TO_SPAWNED_WORKER)
    # A script file, because spawned workers re-import the parent's main module.
    result = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert result["value"] == result["expected"]
    assert result["compiles"] == 0
    # An unpickled function carries its rewritten graph: only the kernel is looked up.
    assert without_op_loads(result["stats"]) == {"graph.hit": 1}
