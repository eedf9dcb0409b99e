"""During a compile, the garbage collector scans only the objects the compile made.

A full collection scans every object the collector tracks: PyTensor's, numba's
and scipy's modules, the user's models and data. Rewriting and numba's typing make
objects fast enough to trigger full collections during a compile, each scanning
that whole heap again (``benchmarks/PHASES.md``, "full garbage collections").

:func:`older_objects_frozen` moves the objects alive when a compile phase starts
out of the collector's reach (``gc.freeze``) and puts them back when it ends
(``gc.unfreeze``). What the compile makes is collected as before, so its garbage
cycles do not pile up; a cycle that was garbage before the phase waits for the
first full collection after it.

PyTensor's rewrites make few garbage cycles (replaced nodes), but enough objects that
survive to trigger several full collections, each scanning every object the rewrite
made so far (on the large benchmark model's new model four, about 105 ms, for 1,578
objects collected). :func:`full_collections_held` holds them off while a rewrite runs; the
young generations are collected as before, and what waits is collected by the first
full collection after it.
"""

from __future__ import annotations

import contextlib
import gc

from numba_cache import session


#: The third threshold while full collections are held (``gc.set_threshold``): more
#: collections of the middle generation than a rewrite makes.
HELD_THRESHOLD = 1_000_000_000

#: Objects frozen before numba_cache was imported: Python 3.12 freezes a few hundred of
#: its own at start-up; anyone freezing later (a server before forking workers) adds.
FROZEN_AT_IMPORT = gc.get_freeze_count()


@contextlib.contextmanager
def older_objects_frozen():
    """Keep full collections inside the block off the objects alive when it starts.

    Nested blocks (a compile inside a compile) and blocks in processes whose
    collector is off do nothing. Neither does a block while objects frozen since
    numba_cache's import are in place: ``gc.unfreeze`` thaws every frozen object,
    and those are someone else's. What was frozen before the import is thawed by
    the first block, as the interpreter's own are.
    """
    state = session.current()
    # The session's flag first: counting the frozen objects walks them all.
    if (state.older_objects_frozen or not gc.isenabled()
            or gc.get_freeze_count() > FROZEN_AT_IMPORT):
        yield
        return
    gc.freeze()
    state.older_objects_frozen = True
    try:
        yield
    finally:
        state.older_objects_frozen = False
        gc.unfreeze()


@contextlib.contextmanager
def full_collections_held():
    """No full collection inside the block (nested blocks, and blocks in processes whose
    collector is off, do nothing); the thresholds are put back at its end."""
    state = session.current()
    if state.full_collections_held or not gc.isenabled():
        yield
        return
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], HELD_THRESHOLD)
    state.full_collections_held = True
    try:
        yield
    finally:
        state.full_collections_held = False
        gc.set_threshold(*thresholds)
