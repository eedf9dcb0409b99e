"""numba's runtime functions (NRT) are stored with the kernels and loaded, not compiled, by warm
processes (numba_cache/kernels/runtime/numba_runtime.py).

A guarded child refuses to build the runtime's module at all
(``nrtdynmod.create_nrt_module``, which numba's compile and ours both start from),
so it only runs if the runtime came from the store.
"""

from __future__ import annotations

import store_states
from helpers import run_python

COMPILE = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
from numba.core.runtime import nrtdynmod
import numba_cache

if {guarded}:
    def refused(context):
        raise RuntimeError("the runtime's module was built: it was not loaded from the store")
    nrtdynmod.create_nrt_module = refused

x = pt.vector("x")
function = pytensor.function([x], [pt.exp(x) * 2.0, pt.cumsum(x)], mode="NUMBA_CACHE")
values = function(np.linspace(-1.0, 1.0, 7))

# numba compiling after it: mutual recursion binds calls through numba's runtime linker,
# which looks up a function of the runtime library by name.
import numba
from numba.core.runtime import rtsys

@numba.njit
def is_even(n):
    return True if n == 0 else is_odd(n - 1)

@numba.njit
def is_odd(n):
    return False if n == 0 else is_even(n - 1)

print(json.dumps({{"stats": dict(numba_cache.session_stats()),
                   "values": [value.tolist() for value in values],
                   "abort_function": rtsys.library.get_pointer_to_function("nrt_unresolved_abort"),
                   "recursion": [is_even(10), is_odd(7), is_even(3)]}}))
"""


def compile_in_child(guarded: bool, env: dict | None = None) -> dict:
    return run_python(COMPILE.format(guarded=guarded), env)


def test_the_first_process_stores_the_runtime_and_later_ones_load_it(private_store):
    cold = compile_in_child(guarded=False)
    assert len(store_states.entries_of(private_store, {"runtime"})) == 1
    warm = compile_in_child(guarded=True)
    assert warm["stats"].get("graph.hit") == 1
    assert warm["values"] == cold["values"]
    assert warm["abort_function"] != 0 and warm["recursion"] == [True, True, False]


def test_a_damaged_runtime_entry_is_compiled_again_and_replaced(private_store):
    cold = compile_in_child(guarded=False)
    [(_, key)] = store_states.entries_of(private_store, {"runtime"})
    assert store_states.damage(private_store, {"runtime"}) == 1
    repaired = compile_in_child(guarded=False)
    assert f"unreadable cache entry {key[:12]}" in repaired["stderr"]
    warm = compile_in_child(guarded=True)
    assert "unreadable" not in warm["stderr"]
    assert cold["values"] == repaired["values"] == warm["values"]



def test_a_read_only_store_without_the_runtime_stays_as_it_is(private_store):
    """A store filled before runtimes were stored, read-only: the runtime is compiled, the
    kernels load, nothing is written."""
    cold = compile_in_child(guarded=False)
    [address] = store_states.entries_of(private_store, {"runtime"})
    assert store_states.remove(private_store, {"runtime"}) == 1
    warm = compile_in_child(guarded=False, env={"NBCACHE_READONLY": "1"})
    assert warm["stats"].get("graph.hit") == 1 and warm["values"] == cold["values"]
    assert not store_states.record_path(private_store, *address).exists()
