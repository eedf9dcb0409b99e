"""Processes compiling the same graph at the same time compile each kernel once."""

from __future__ import annotations

from helpers import run_python

RACE = """
import json, multiprocessing, sys

def compile_after_barrier(barrier, queue):
    import numpy as np, pytensor, pytensor.tensor as pt
    import numba_cache
    x = pt.vector("x")
    barrier.wait()
    f = pytensor.function([x], pt.exp(x).sum() * 3 + pt.log1p(x ** 2), mode="NUMBA_CACHE")
    queue.put((f(np.arange(3.0)).tolist(), dict(numba_cache.session_stats())))

if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1] if len(sys.argv) > 1 else "{method}")
    barrier, queue = context.Barrier({n}), context.Queue()
    workers = [context.Process(target=compile_after_barrier, args=(barrier, queue)) for _ in range({n})]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    print(json.dumps({{"results": results, "exitcodes": [w.exitcode for w in workers]}}))
"""


def race(tmp_path, method: str, n: int = 3) -> dict:
    script = tmp_path / "race.py"
    script.write_text(RACE.format(method=method, n=n))
    return run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")


def check_single_flight(outcome: dict, n: int = 3) -> None:
    assert outcome["exitcodes"] == [0] * n
    values = [values for values, _ in outcome["results"]]
    assert all(v == values[0] for v in values)
    stats = [stats for _, stats in outcome["results"]]
    # Exactly one process compiled the graph kernel; the others waited and loaded it.
    assert sum(s.get("graph.miss", 0) for s in stats) == 1, stats
    assert sum(s.get("graph.hit", 0) for s in stats) == n - 1, stats


def test_forked_processes_compile_a_shared_graph_once(tmp_path):
    check_single_flight(race(tmp_path, "fork"))


def test_spawned_processes_compile_a_shared_graph_once(tmp_path):
    check_single_flight(race(tmp_path, "spawn"))
