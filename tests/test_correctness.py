"""Every op family gives Python-mode results, compiled cold and then loaded warm."""

from __future__ import annotations

import pytest
from graph_families import FAMILIES
from helpers import run_python

# Fresh processes compiling real graphs: the slow tier, which CI runs (and --run-slow).
pytestmark = pytest.mark.slow

EVALUATE_ALL = """
import json, warnings
import numpy as np
import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
from graph_families import FAMILIES, evaluate
from pytensor.compile.mode import Mode

warnings.simplefilter("ignore")
python_mode = Mode(linker="py", optimizer="fast_run")
report = {}
for name in FAMILIES:
    expected = evaluate(name, python_mode)
    numba_cache.reset_session_stats()
    with count_numba_compiles() as compiles:
        results = evaluate(name, "NUMBA_CACHE")
    report[name] = {
        "equal": len(results) == len(expected) and all(
            r.dtype == e.dtype and r.shape == e.shape and np.allclose(r, e, equal_nan=True)
            for r, e in zip(results, expected)
        ),
        "compiles": compiles,
        "stats": dict(numba_cache.session_stats()),
        "results": [r.tolist() for r in results],
    }
print(json.dumps(report))
"""


def test_families_cold_then_warm_match_python_mode():
    cold = run_python(EVALUATE_ALL, timeout=1200)
    warm = run_python(EVALUATE_ALL, timeout=1200)
    for name in FAMILIES:
        assert cold[name]["equal"], f"{name}: cold results differ from Python mode"
        assert warm[name]["equal"], f"{name}: warm results differ from Python mode"
        assert warm[name]["results"] == cold[name]["results"], name
        # Warm: every graph kernel is a hit and numba compiles nothing, not even the
        # object-mode blocks of BLAS/LAPACK pointer getters (loaded from the store).
        assert warm[name]["compiles"] == [], (name, warm[name]["compiles"])
        assert set(warm[name]["stats"]) - {"objmode.hit", "op.hit"} == {"rewrite.hit", "graph.hit"}, (
            name, warm[name]["stats"])
