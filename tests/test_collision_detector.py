"""The collision detector (``NBCACHE_VERIFY_HITS``) catches a collision planted on purpose."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import numba_cache
from numba_cache import settings
from numba_cache.kernels.collisions import normalized_ir
from numba_cache.kernels.context import current_context
from numba_cache.store import StoreWarning

VALUES = np.array([0.5, 1.0, 2.0])


def compile_and_call(make_output):
    x = pt.vector("x")
    return pytensor.function([x], make_output(x), mode="NUMBA_CACHE")(VALUES)


def graph_entries() -> dict:
    context = current_context()
    return {entry.summary + entry.key: entry for entry in
            context.store.entries(context.fingerprint.digest, kind="graph")}


def plant_collision():
    """Compile exp(x) and log(x), then store log's graph record under exp's graph key."""
    compile_and_call(pt.exp)
    [exp_key] = graph_entries().values()
    compile_and_call(pt.log)
    [log_key] = [e for e in graph_entries().values() if e.key != exp_key.key]
    context = current_context()
    log_entry = context.store.read(context.fingerprint.digest, log_key.key)
    context.store.save(dataclasses.replace(log_entry, key=exp_key.key))
    return exp_key.key, log_key.key


def test_a_planted_collision_is_served_without_the_detector():
    """The plant works: the exp graph then returns log's values (what the detector is for)."""
    plant_collision()
    np.testing.assert_allclose(compile_and_call(pt.exp), np.log(VALUES))


def test_the_detector_catches_a_planted_collision_and_names_both_keys():
    exp_key, log_key = plant_collision()
    settings.configure(verify_hits=1)
    numba_cache.reset_session_stats()
    with pytest.warns(StoreWarning, match="key collision") as caught:
        result = compile_and_call(pt.exp)
    np.testing.assert_allclose(result, np.exp(VALUES))
    [message] = [str(w.message) for w in caught if "key collision" in str(w.message)]
    assert exp_key[:12] in message and log_key[:12] in message
    assert numba_cache.session_stats()["collision"] == 1
    context = current_context()
    assert context.store.stats(context.fingerprint.digest)["counters"]["collision"] == 1
    # The bad entry was replaced by the code compiled now: later processes get exp.
    settings.configure(verify_hits=0)
    np.testing.assert_allclose(compile_and_call(pt.exp), np.exp(VALUES))


def test_verified_hits_of_sound_entries_pass():
    compile_and_call(pt.exp)
    settings.configure(verify_hits=1)
    numba_cache.reset_session_stats()
    np.testing.assert_allclose(compile_and_call(pt.exp), np.exp(VALUES))
    stats = numba_cache.session_stats()
    assert stats["verify.same"] >= 1 and stats["collision"] == 0, stats


def test_normalized_ir_ignores_numba_unique_ids_only():
    first = ('@_ZN08NumbaEnv1f5graphB4v123B3abcE5ArrayE = global ptr null\n'
             '@".const" = internal constant [9 x i8] c"missing Environment: _ZN1fB4v123B3abcE"')
    second = first.replace("v123", "v987").replace("B3abc", "B5xyzuv").replace("[9 x", "[11 x")
    assert normalized_ir(first) == normalized_ir(second)
    assert normalized_ir(first) != normalized_ir(first.replace("ArrayE", "ArrayI"))
