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
