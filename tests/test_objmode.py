"""Object-mode blocks (BLAS/LAPACK pointer getters) are loaded from the store, never recompiled.

One small Cholesky graph, compiled in fresh processes: the first stores the
blocks, the next compiles nothing; a damaged block is recompiled with a warning;
blocks outside PyTensor's dispatch are left to numba; and the function numba's
machine code calls keeps numba's name, so code pickled in a process with
numba_cache refers to numba's own function elsewhere.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_python, without_op_loads

from numba_cache.store.local import RECORD_SUFFIX

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

CHOLESKY = """
import json, warnings
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from numba_cache.kernels.context import current_context

x = pt.matrix("x", shape=(3, 3))
with warnings.catch_warnings(record=True) as caught, count_numba_compiles() as compiles:
    warnings.simplefilter("always")
    f = pytensor.function([x], pt.linalg.cholesky(x @ x.T + pt.eye(3)).sum(), mode="NUMBA_CACHE")
    value = f(np.arange(9.0).reshape(3, 3))
store = current_context().store
print(json.dumps({
    "value": float(value),
    "compiled": compiles,
    "stats": dict(numba_cache.session_stats()),
    "warnings": [str(w.message) for w in caught if "numba_cache" in str(w.message)],
    "blocks": [[e.key, e.summary] for e in store.entries(kind="objmode")],
    "root": str(store.root),
    "fingerprint": current_context().fingerprint.digest,
}))
"""


def test_blocks_are_stored_by_the_first_process_and_loaded_by_the_next(private_store):
    import numpy as np

    cold = run_python(CHOLESKY)
    points = np.arange(9.0).reshape(3, 3)
    assert cold["value"] == np.linalg.cholesky(points @ points.T + np.eye(3)).sum()
    # Every block the kernels hold, stored with them: among them the two that run,
    # the matrix product's gemm and the factorisation's potrf.
    stored = {summary.rsplit(".", 1)[1] for _, summary in cold["blocks"]}
    assert {"get_gemm_pointer", "get_potrf_pointer"} <= stored, stored

    warm = run_python(CHOLESKY)
    assert warm["value"] == cold["value"]
    assert warm["compiled"] == []
    assert without_op_loads(warm["stats"]) == {"rewrite.hit": 1, "graph.hit": 1, "objmode.hit": 2}
    assert warm["warnings"] == []


def test_a_damaged_block_is_recompiled_with_a_warning_and_stored_again(private_store):
    cold = run_python(CHOLESKY)
    [key] = [key for key, summary in cold["blocks"] if summary.endswith("get_potrf_pointer")]
    [record] = Path(cold["root"], cold["fingerprint"]).rglob(f"{key}{RECORD_SUFFIX}")
    data = bytearray(record.read_bytes())
    data[len(data) // 2] ^= 0xFF
    record.write_bytes(bytes(data))

    damaged = run_python(CHOLESKY)
    assert damaged["value"] == cold["value"]
    assert without_op_loads(damaged["stats"]) == {"rewrite.hit": 1, "graph.hit": 1, "objmode.hit": 1,
                                "objmode.miss": 1}
    [warning] = damaged["warnings"]
    assert "unreadable cache entry" in warning and key[:12] in warning
    assert [name.rsplit(".", 1)[1] for name in damaged["compiled"]] == ["get_potrf_pointer"]

    repaired = run_python(CHOLESKY)
    assert repaired["value"] == cold["value"]
    assert repaired["compiled"] == [] and repaired["stats"]["objmode.hit"] == 2


UNCALLED = """
import pytensor, pytensor.tensor as pt

x = pt.matrix("x", shape=(3, 3))
uncalled = pytensor.function([x], pt.linalg.cholesky(x @ x.T + pt.eye(3)).sum(), mode="NUMBA_CACHE")
"""


def test_warm_stores_the_blocks_of_kernels_it_never_runs(private_store, tmp_path):
    """numba compiles a block while typing its kernel: storing the kernel stores the block."""
    script = tmp_path / "uncalled.py"
    script.write_text(UNCALLED)
    warmed = subprocess.run([sys.executable, "-m", "numba_cache", "warm", str(script)],
                            capture_output=True, text=True, timeout=600, check=False)
    assert warmed.returncode == 0, warmed.stderr

    first_run = run_python(CHOLESKY)
    assert first_run["compiled"] == []
    assert without_op_loads(first_run["stats"]) == {"rewrite.hit": 1, "graph.hit": 1, "objmode.hit": 2}


USER_BLOCK = """
import json
import numba, numpy as np
from numba import types
import numba_cache
from numba_cache.kernels.context import current_context

def python_side(value):
    return value * 2

@numba.njit
def with_block(value):
    with numba.objmode(doubled=types.float64):
        doubled = python_side(value)
    return doubled

print(json.dumps({
    "value": with_block(1.5),
    "stored": len(current_context().store.entries()),
}))
"""


def test_blocks_outside_pytensor_are_compiled_by_numba_and_not_stored(private_store):
    result = run_python(USER_BLOCK)
    assert result == {"value": 3.0, "stored": 0, "stderr": result["stderr"]}


BUILTIN_WITHOUT_CACHE = """
import json
import numpy as np, pytensor, pytensor.tensor as pt
import numba_cache
from numba_cache.kernels.context import current_context

pytensor.config.numba__cache = False
x = pt.matrix("x", shape=(3, 3))
f = pytensor.function([x], pt.linalg.cholesky(x @ x.T + pt.eye(3)).sum(), mode="NUMBA")
print(json.dumps({
    "value": float(f(np.arange(9.0).reshape(3, 3))),
    "stored": len(current_context().store.entries()),
}))
"""


def test_blocks_of_kernels_compiled_afresh_in_each_process_are_not_stored(private_store):
    """PyTensor's NUMBA mode with its cache off: new blocks every process, nothing to keep."""
    result = run_python(BUILTIN_WITHOUT_CACHE)
    assert result["value"] > 0 and result["stored"] == 0


BUILTIN_WITH_ITS_CACHE = BUILTIN_WITHOUT_CACHE.replace(
    "pytensor.config.numba__cache = False\n", "").replace(
    '"stored"', '"stats": dict(numba_cache.session_stats()), "stored"')


def test_blocks_of_kernels_from_pytensors_own_cache_are_not_looked_up(private_store, tmp_path):
    """PyTensor's NUMBA mode in a process that imported numba_cache: the second process
    loads the kernels from PyTensor's cache and compiles their blocks as they first run.
    No kernel of ours holds them, so the store is not asked for them: nothing is counted
    (they were counted as misses, though never stored) and nothing stored."""
    env = {"PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'pytensor'}"}
    compiled = run_python(BUILTIN_WITH_ITS_CACHE, env=env)
    loaded = run_python(BUILTIN_WITH_ITS_CACHE, env=env)
    assert loaded["value"] == compiled["value"] > 0
    for result in (compiled, loaded):
        assert result["stored"] == 0
        assert not [event for event in result["stats"] if event.startswith("objmode.")], result


NAME_IN_PICKLES = """
import json
from numba.core import pythonapi, serialize
import numba_cache  # installs the store-backed compile

# As numba's lowering pickles it into machine code (ObjModeUtils.load_dispatcher).
dumped = serialize.dumps(pythonapi.ObjModeUtils._call_objmode_dispatcher)
print(json.dumps({"pickle": dumped.hex()}))
"""

LOAD_WITHOUT_NUMBA_CACHE = """
import json, pickle, sys
function = pickle.loads(bytes.fromhex({pickle!r}))
print(json.dumps({{
    "file": function.__code__.co_filename,
    "numba_cache_imported": "numba_cache" in sys.modules,
}}))
"""


def test_machine_code_refers_to_numbas_function_by_numbas_name():
    """Code compiled with numba_cache imported (PyTensor's own cache too) runs without it."""
    dumped = run_python(NAME_IN_PICKLES)["pickle"]
    loaded = run_python(LOAD_WITHOUT_NUMBA_CACHE.format(pickle=dumped))
    assert loaded["file"].endswith("pythonapi.py")
    assert loaded["numba_cache_imported"] is False


SOLVE_THEN_A_NEW_KERNEL = """
import json, sys, warnings
import numpy as np, pytensor, pytensor.tensor as pt
from pytensor.compile.mode import Mode
import numba_cache

warnings.simplefilter("error")  # as PyTensor's own test suite runs: a warning fails the compile
A, b = pt.matrix("A"), pt.vector("b")
a_value = np.random.default_rng(0).normal(size=(4, 4)) + 4 * np.eye(4)
b_value = np.arange(4.0)
solved = pt.linalg.solve(A, b, assume_a="gen", b_ndim=1)
graphs = [solved]
if sys.argv[1:] == ["then-new"]:
    # A new graph kernel around the same solve op kernel, whose blocks were loaded from
    # the store: with the op kernels linked in, its IR names them.
    graphs.append(pt.exp(solved) * 2 + solved.sum())
values, expected = [], []
for graph in graphs:
    values.append(pytensor.function([A, b], graph, mode="NUMBA_CACHE")(a_value, b_value).tolist())
    python_mode = Mode(linker="py", optimizer="fast_run")
    expected.append(pytensor.function([A, b], graph, mode=python_mode)(a_value, b_value).tolist())
print(json.dumps({"values": values, "expected": expected,
                  "stats": dict(numba_cache.session_stats())}))
"""


@pytest.mark.parametrize("link_ops", ["0", "1"], ids=["by-symbol", "op-kernels-linked"])
def test_a_kernel_holding_a_block_loaded_from_the_store_compiles_without_warnings(link_ops):
    """A block loaded from the store (its code cannot be inspected) held by a kernel
    compiled afterwards: nothing on the store path asks numba for its IR (which warns)."""
    import numpy as np

    env = {"NBCACHE_LINK_OPS": link_ops}
    cold = run_python(SOLVE_THEN_A_NEW_KERNEL, env=env)
    assert "objmode.hit" not in cold["stats"], cold["stats"]
    warm = run_python(SOLVE_THEN_A_NEW_KERNEL.replace("sys.argv[1:]", '["then-new"]'), env=env)
    assert warm["stats"].get("objmode.hit"), warm["stats"]  # the first kernel's blocks
    assert warm["stats"].get("graph.miss") == 1, warm["stats"]  # the second graph
    for values, expected in ((cold["values"], cold["expected"]), (warm["values"], warm["expected"])):
        for value, reference in zip(values, expected, strict=True):
            np.testing.assert_allclose(value, reference, rtol=1e-12)
    assert warm["values"][0] == cold["values"][0]


OWN_CACHE_THEN_STORE = """
import json, sys, warnings
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("error")
from own_cached import add_one

from numba_cache.kernels.protocol.cache import BlockCache
from numba_cache.kernels.context import current_context
from numba_cache.keys.kernels import object_mode_key

add_one(1.0)
signature = add_one.signatures[0]
context = current_context()
key = object_mode_key("0" * 36, "own_cached.add_one", str(signature), context.fingerprint)
BlockCache(context, key, []).save_overload(
    signature, add_one.overloads[signature])
print(json.dumps({"numba_cache_hits": sum(add_one.stats.cache_hits.values()),
                  "stored": context.store.load(context.fingerprint.digest, key.digest) is not None}))
"""


def test_code_numba_loaded_from_its_own_cache_is_neither_inspected_nor_stored(tmp_path):
    """numba's ``get_llvm_str`` warns on code it loaded from its cache, and returns text
    that is not the code: such a library is never inspected, digested or stored."""
    (tmp_path / "own_cached.py").write_text(
        "import numba\n\n@numba.njit(cache=True)\ndef add_one(x):\n    return x + 1.0\n")
    code = OWN_CACHE_THEN_STORE.replace("sys.argv[1]", repr(str(tmp_path)))
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    compiled = run_python(code, env=env)
    assert (compiled["numba_cache_hits"], compiled["stored"]) == (0, True), compiled
    loaded = run_python(code.replace('"0" * 36', '"1" * 36'), env=env)
    assert (loaded["numba_cache_hits"], loaded["stored"]) == (1, False), loaded
