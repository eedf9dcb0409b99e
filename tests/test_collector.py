"""During a compile the garbage collector scans only what the compile made (numba_cache.collector).

A fresh process compiles a small graph cold, collecting often (low thresholds) and
noting, at each collection, how many objects were frozen and which compile phase
was running. Every collection inside PyTensor's rewrites, the conversion and
numba's compile must find the objects older than the phase frozen; after the
compile nothing of ours stays frozen, garbage made before it is collected, and the
results are those of a compile with the collector off, where nothing is frozen.
"""

from __future__ import annotations

import gc

from helpers import run_python

from numba_cache.collector import FROZEN_AT_IMPORT, older_objects_frozen

COMPILE = """
import gc, json, sys, weakref
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache import collector
{prelude}
#: Functions whose frames on the stack say which phase a collection fell in.
PHASES = {{"prepare_fgraph": "rewriting", "graph_kernel": "conversion",
           "_compile_for_args": "numba compile"}}
# How often the collector counts frozen objects (it walks them all): once a phase.
asked = []
count_frozen = gc.get_freeze_count
def counted():
    if sys._getframe(1).f_code.co_filename == collector.__file__:
        asked.append(1)
    return count_frozen()
gc.get_freeze_count = counted

seen = []
def note(phase, info):
    if phase != "start":
        return
    frame, phases = sys._getframe(1), set()
    while frame is not None:
        if frame.f_code.co_name in PHASES:
            phases.add(PHASES[frame.f_code.co_name])
        frame = frame.f_back
    seen.append((gc.get_freeze_count(), sorted(phases)))

class Cyclic:
    pass
garbage = Cyclic()
garbage.me = garbage  # a cycle, garbage from before the compile
collected_before_compile = weakref.ref(garbage)
del garbage

x = pt.vector("x", shape=(5,))
y = pt.matrix("y", shape=(5, 3))
cost = (pt.exp(x).sum() + pt.log1p(pt.dot(x, y) ** 2).sum() + (pt.tanh(y) * 2).sum())
outputs = [cost, *pt.grad(cost, [x, y])]
gc.set_threshold(200, 1000, 1000)  # often, and young generations only: cheap
gc.callbacks.append(note)
function = pytensor.function([x, y], outputs, mode="NUMBA_CACHE")
values = function(np.linspace(-1, 1, 5), np.arange(15.0).reshape(5, 3) / 10)
gc.callbacks.remove(note)
frozen_after = gc.get_freeze_count()
gc.collect()
print(json.dumps({{
    "seen": seen, "frozen_after": frozen_after, "frozen_at_import": collector.FROZEN_AT_IMPORT,
    "garbage_collected": collected_before_compile() is None, "counted_frozen": len(asked),
    "values": [np.asarray(value).tolist() for value in values],
    "stats": dict(numba_cache.session_stats())}}))
"""

def compile_in_child(tmp_path, name: str, prelude: str = "") -> dict:
    return run_python(COMPILE.format(prelude=prelude),
                      env={"NBCACHE_DIR": str(tmp_path / name / "store"),
                           "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / name / 'compiledir'}",
                           "NBCACHE_COMPILE_AHEAD": "0"})


def test_collections_during_each_compile_phase_skip_the_older_objects(tmp_path):
    result = compile_in_child(tmp_path, "frozen")
    assert result["stats"].get("graph.miss") == 1, result["stats"]
    baseline = result["frozen_at_import"]
    by_phase: dict[str, list[int]] = {}
    for count, phases in result["seen"]:
        for phase in phases:
            by_phase.setdefault(phase, []).append(count)
    assert set(by_phase) == {"rewriting", "conversion", "numba compile"}, by_phase.keys()
    for phase, counts in by_phase.items():
        # Frozen: the whole heap of the process, thousands of objects, not the interpreter's few.
        assert min(counts) > baseline + 10_000, (phase, counts[:5], baseline)
    assert result["frozen_after"] <= baseline
    assert result["garbage_collected"]
    # Not once a nested compile (every op kernel's): with the heap frozen, each count
    # walked it, and cost more than the collections saved.
    assert result["counted_frozen"] == 3, result["counted_frozen"]

    # With the collector off the blocks do nothing: the same compile, nothing frozen.
    reference = compile_in_child(tmp_path, "collector off", "gc.disable()")
    assert reference["seen"] == [] and reference["stats"] == result["stats"]
    assert result["values"] == reference["values"]


def test_a_block_inside_a_block_or_beside_anyone_elses_freeze_does_nothing():
    assert gc.get_freeze_count() <= FROZEN_AT_IMPORT
    with older_objects_frozen():
        frozen = gc.get_freeze_count()
        assert frozen > FROZEN_AT_IMPORT
        with older_objects_frozen():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == 0

    gc.freeze()  # someone's: a server's before forking its workers, say
    try:
        theirs = gc.get_freeze_count()
        with older_objects_frozen():
            assert gc.get_freeze_count() == theirs
        assert gc.get_freeze_count() == theirs
    finally:
        gc.unfreeze()


def test_a_block_with_the_collector_off_freezes_nothing():
    gc.disable()
    try:
        with older_objects_frozen():
            assert gc.get_freeze_count() <= FROZEN_AT_IMPORT
    finally:
        gc.enable()
