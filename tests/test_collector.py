"""During a compile the garbage collector scans only what the compile made (numba_cache.collector).

A fresh process compiles a small graph cold, collecting often (low thresholds) and
noting, at each collection, how many objects were frozen and which compile phase
was running. Every collection inside PyTensor's rewrites, the conversion and
numba's compile must find the objects older than the phase frozen; after the
compile nothing of ours stays frozen, garbage made before it is collected, and the
results are those of a compile with the collector off, where nothing is frozen.
Inside PyTensor's rewrites full collections are held off (and held off, none happens),
and the thresholds are the process's own again after the compile.
"""

from __future__ import annotations

import gc

from helpers import run_python

from numba_cache.collector import (
    FROZEN_AT_IMPORT,
    HELD_THRESHOLD,
    full_collections_held,
    older_objects_frozen,
)

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
        if frame.f_code.co_name == "prepare_fgraph" and "pytensor" in frame.f_code.co_filename:
            phases.add("pytensor's rewrites")
        frame = frame.f_back
    seen.append((gc.get_freeze_count(), sorted(phases), gc.get_threshold()[2]))

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
gc.set_threshold(*{thresholds})
gc.callbacks.append(note)
function = pytensor.function([x, y], outputs, mode="NUMBA_CACHE")
values = function(np.linspace(-1, 1, 5), np.arange(15.0).reshape(5, 3) / 10)
gc.callbacks.remove(note)
frozen_after = gc.get_freeze_count()
thresholds_after = list(gc.get_threshold())
gc.collect()
print(json.dumps({{
    "seen": seen, "frozen_after": frozen_after, "thresholds_after": thresholds_after, "frozen_at_import": collector.FROZEN_AT_IMPORT,
    "garbage_collected": collected_before_compile() is None, "counted_frozen": len(asked),
    "values": [np.asarray(value).tolist() for value in values],
    "stats": dict(numba_cache.session_stats())}}))
"""

#: Collections often, and of the young generations only: cheap.
OFTEN = (200, 1000, 1000)


def compile_in_child(tmp_path, name: str, prelude: str = "", thresholds=OFTEN) -> dict:
    return run_python(COMPILE.format(prelude=prelude, thresholds=thresholds),
                      env={"NBCACHE_DIR": str(tmp_path / name / "store"),
                           "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / name / 'compiledir'}",
                           "NBCACHE_COMPILE_AHEAD": "0"})


def test_collections_during_each_compile_phase_skip_the_older_objects(tmp_path):
    result = compile_in_child(tmp_path, "frozen")
    assert result["stats"].get("graph.miss") == 1, result["stats"]
    baseline = result["frozen_at_import"]
    by_phase: dict[str, list[int]] = {}
    for count, phases, _ in result["seen"]:
        for phase in phases:
            by_phase.setdefault(phase, []).append(count)
    assert set(by_phase) == {"rewriting", "pytensor's rewrites", "conversion", "numba compile"}, (
        by_phase.keys())
    for phase, counts in by_phase.items():
        # Frozen: the whole heap of the process, thousands of objects, not the interpreter's few.
        assert min(counts) > baseline + 10_000, (phase, counts[:5], baseline)
    assert result["frozen_after"] <= baseline
    # Full collections held inside PyTensor's rewrites alone; the thresholds back after.
    inside = {third for _, phases, third in result["seen"] if "pytensor's rewrites" in phases}
    outside = {third for _, phases, third in result["seen"] if "pytensor's rewrites" not in phases}
    assert inside == {HELD_THRESHOLD} and outside == {OFTEN[2]}, (inside, outside)
    assert result["thresholds_after"] == list(OFTEN)
    assert result["garbage_collected"]
    # Not once a nested compile (every op kernel's): with the heap frozen, each count
    # walked it, and cost more than the collections saved.
    assert result["counted_frozen"] == 3, result["counted_frozen"]

    # With the collector off the blocks do nothing: the same compile, nothing frozen.
    reference = compile_in_child(tmp_path, "collector off", "gc.disable()")
    assert reference["seen"] == [] and reference["stats"] == result["stats"]
    assert result["values"] == reference["values"]


def test_held_full_collections_do_not_happen():
    """Objects that survive young collections make full ones often with a low third
    threshold, and none while held."""
    full = []

    def note(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    def make_survivors() -> int:
        del full[:]
        kept = []
        for _ in range(200_000):
            kept.append([kept[-1] if kept else None])
        return len(full)

    before = gc.get_threshold()
    gc.set_threshold(700, 2, 2)
    gc.callbacks.append(note)
    try:
        assert make_survivors() > 0
        with full_collections_held():
            assert make_survivors() == 0
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*before)


def test_held_full_collections_nest_and_leave_the_collector_off_alone():
    before = gc.get_threshold()
    with full_collections_held():
        held = gc.get_threshold()
        assert held[:2] == before[:2] and held[2] > 10**6
        with full_collections_held():
            assert gc.get_threshold() == held
        assert gc.get_threshold() == held
    assert gc.get_threshold() == before
    gc.disable()
    try:
        with full_collections_held():
            assert gc.get_threshold() == before
    finally:
        gc.enable()


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
