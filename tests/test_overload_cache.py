"""numba's own implementations (``@overload``s of numba's modules), stored and loaded.

nutpie's callbacks around a new graph load the implementations an earlier process
compiled (numba_cache/kernels/protocol/overload_cache.py): the keys, the flags
they hold, and where they are served. The callbacks themselves, in fresh PyMC
processes, are tested in tests/test_nutpie.py and tests/test_pymc.py.
"""

from __future__ import annotations

import pytest
from helpers import run_python

from numba_cache.keys.overloads import describe, overload_key

#: A child compiling a fused elemwise graph through NUMBA_CACHE and reporting its counters.
GRAPH = """
import json
import numpy as np
import pytensor, pytensor.tensor as pt
import numba_cache

x, y = pt.vector("x"), pt.vector("y")
function = pytensor.function([x, y], [pt.exp(x) * 2.0 + y, (x * y).sum()], mode="NUMBA_CACHE")
function(np.linspace(-2.0, 3.0, 17), np.linspace(1.0, 0.5, 17))
print(json.dumps({"stats": dict(numba_cache.session_stats())}))
"""


def test_op_and_graph_kernels_compile_numbas_implementations_as_numba_does():
    """What computes a graph's values links numba's implementations compiled in its own
    process, as without the store (overload_cache.SERVED_WITHIN says why)."""
    for _ in range(2):  # cold, then with whatever the first process stored
        stats = run_python(GRAPH)["stats"]
        assert not any(name.startswith("overload.") for name in stats), stats


#: A child compiling a numba function as numba_cache compiles its kernels: `nansum`'s
#: implementation inherits the caller's fastmath, whose ``nnan`` lets LLVM take every value
#: for a number.
NANSUM = """
import json
import numba, numpy as np
import numba_cache, pytensor  # numba_cache's caches are installed with PyTensor's import
from numba_cache.kernels.protocol.cache import kernel_compile

def total(values):
    return np.nansum(values)

values = np.array([1.0, np.nan, 2.0])
with kernel_compile("cfunc"):
    result = numba.njit(fastmath={fastmath})(total)(values)
print(json.dumps({{"result": None if np.isnan(result) else float(result),
                   "stats": dict(numba_cache.session_stats())}}))
"""


def test_an_implementation_compiled_under_a_callers_fastmath_is_not_served_to_another_caller():
    fast = run_python(NANSUM.format(fastmath=True))
    assert fast["stats"].get("overload.miss", 0) > 0
    exact = run_python(NANSUM.format(fastmath=False))
    assert exact["result"] == 3.0, exact["stats"]
    # np.nansum's implementation, and what it calls, compiled again under other flags.
    assert exact["stats"].get("overload.miss", 0) > 0


def test_numbas_implementations_are_left_alone_outside_numba_cache_compiles():
    """A user's own numba function, or PyTensor's NUMBA mode without activation, compiles
    as numba compiles: nothing looked up, nothing stored."""
    outside = run_python(NANSUM.replace('with kernel_compile("cfunc"):\n    ', "").format(
        fastmath=False))
    assert outside["result"] == 3.0 and outside["stats"] == {}


@pytest.mark.parametrize("fastmath", [False, {"nsz", "arcp"}])
def test_the_key_is_the_same_in_every_process_and_follows_the_signature_and_flags(fastmath):
    code = f"""
    import json, numba
    from numba import types
    from numba_cache._compat import numba_internals
    from numba_cache.keys import current_fingerprint
    from numba_cache.keys.overloads import overload_key

    def implementation(values, axis=None):
        return values

    dispatcher = numba.njit(fastmath={fastmath!r})(implementation)
    flags = numba_internals.flag_values(numba_internals.compile_flags(dispatcher))
    args = (types.Array(types.float64, 1, "C"), types.UniTuple(types.int64, 2))
    key = overload_key(implementation, args, flags, {{}}, current_fingerprint())
    print(json.dumps({{"digest": key.digest}}))
    """
    digests = {run_python(code, {"PYTHONHASHSEED": str(seed)})["digest"] for seed in (1, 2)}
    assert len(digests) == 1


def test_numba_types_are_described_by_class_and_key_not_by_pickle():
    from numba import types

    array = types.Array(types.float64, 1, "C")
    assert describe(array) == describe(types.Array(types.float64, 1, "C"))
    assert describe(array) != describe(types.Array(types.float64, 1, "A"))
    assert describe(types.UniTuple(types.int64, 1)) != describe(types.UniTuple(types.int64, 2))
    array.some_cached_value = object()  # what numba caches on a type must not change its key
    assert describe(array) == describe(types.Array(types.float64, 1, "C"))


def test_a_numba_type_told_apart_by_an_object_makes_no_key():
    """A function's type is keyed by its typing template, a class made at run time whose
    name two functions may share: described by name, two such types would be one key."""
    import numba
    from numba import types

    from numba_cache.keys.canonical import UnkeyableValue

    function_type = types.Function(numba.core.typing.templates.make_overload_template(
        len, lambda value: None, {}, True, "never", False))
    with pytest.raises(UnkeyableValue):
        describe((function_type,))


def test_a_closure_value_without_a_description_by_content_makes_no_key():
    from numba_cache.keys import current_fingerprint
    from numba_cache.keys.canonical import UnkeyableValue

    held = (lambda: None).__code__.replace()  # a code object's pickle fails

    def implementation():
        return held

    with pytest.raises(UnkeyableValue):
        overload_key(implementation, (), {}, {}, current_fingerprint())
