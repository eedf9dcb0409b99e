"""PyMC models of many families (tests/pymc_models.py), differentially, in fresh processes.

For each CPU target (the host's, and numba's portable ``generic``): PyTensor's ``NUMBA``
mode, numba_cache cold on an empty store, then warm. Each process compiles every
model's ``logp_dlogp_function`` as PyMC's samplers do and evaluates it at three points.
Ours cold and warm must agree bit for bit, and the warm process must compile nothing;
ours against ``NUMBA`` (other generated code) within the stated bound: logp within
``NUMBA_ULP_BOUND`` ULP, each gradient element within that many ULP of itself or of the
gradient's largest element (a near-cancelling element is far in ULP of itself while its
difference stays at the rounding of its terms: ``docs/limits.md``, "Results and bits").
"""

from __future__ import annotations

import math

import pytest
from helpers import run_python

from numba_cache.evaluation.compare import NUMBA_ULP_BOUND, ulp_distance, ulp_distance_at_scale

# Fresh processes compiling thirteen PyMC models (about 3 minutes a target): the slow tier.
pytestmark = pytest.mark.slow

TARGETS = {"host": {}, "generic": {"NUMBA_CPU_NAME": "generic"}}

EVALUATE_MODELS = """
import json, os, warnings
import numpy as np
mode = os.environ["MODE"]
if mode == "NUMBA_CACHE":
    import numba_cache
from numba_cache.evaluation.compile_events import count_numba_compiles
import pymc_models

warnings.simplefilter("ignore")
report = {}
for name in pymc_models.MODELS:
    model = pymc_models.build(name)
    if mode == "NUMBA_CACHE":
        numba_cache.reset_session_stats()
    with count_numba_compiles() as compiles:
        results = pymc_models.evaluate(model, mode)
    report[name] = {
        "results": results,
        "compiles": compiles,
        "stats": dict(numba_cache.session_stats()) if mode == "NUMBA_CACHE" else {},
    }
print(json.dumps(report))
"""


@pytest.mark.parametrize("target", TARGETS)
def test_every_model_cold_and_warm_bit_for_bit_and_as_numba_within_the_bound(target, tmp_path):
    environment = TARGETS[target] | {
        "NBCACHE_DIR": str(tmp_path / "store"),
        "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'pytensor'}",
        "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
    }
    numba, cold, warm = (run_python(EVALUATE_MODELS, environment | {"MODE": mode}, timeout=1800)
                         for mode in ("NUMBA", "NUMBA_CACHE", "NUMBA_CACHE"))
    del numba["stderr"]
    for name in numba:
        ours = cold[name]["results"]
        assert all(math.isfinite(value) for point in ours for value in point), (name, ours)
        assert warm[name]["results"] == ours, f"{name}: warm results differ from cold ones"
        assert warm[name]["compiles"] == [], (name, warm[name]["compiles"])
        assert warm[name]["stats"].get("graph.hit") == 1, (name, warm[name]["stats"])
        for mine, builtin in zip(ours, numba[name]["results"]):
            assert ulp_distance(mine[0], builtin[0]) <= NUMBA_ULP_BOUND, (name, mine[0], builtin[0])
            distance = ulp_distance_at_scale(mine[1:], builtin[1:])
            assert distance <= NUMBA_ULP_BOUND, (name, distance, mine[1:], builtin[1:])


def test_every_hit_compiled_again_is_the_same_code(tmp_path):
    """The collision detector, every hit verified, names no collision where there is
    none: a fresh process compiles each stored kernel again and compares its code with
    what the store served, which a cold process stored with a helper compiling ahead
    (its history: numba's subroutines optimised in another order, LKJ's ``Sum{axis=0}``
    and ``Squeeze{axis=0}`` compiled to other IR at one stage or the other). The
    verifying process runs the code it compiled: the same bits as the cold one's."""
    environment = {
        "NBCACHE_DIR": str(tmp_path / "store"),
        "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'pytensor'}",
        "MODE": "NUMBA_CACHE",
    }
    cold = run_python(EVALUATE_MODELS, environment | {"NBCACHE_COMPILE_AHEAD": "1"}, timeout=1800)
    verified = run_python(EVALUATE_MODELS, environment | {"NBCACHE_VERIFY_HITS": "1"},
                          timeout=1800)
    del cold["stderr"], verified["stderr"]
    assert any(cold[name]["stats"].get("compiled_ahead:helper") for name in cold), cold
    for name in cold:
        stats = verified[name]["stats"]
        assert stats.get("verify.same", 0) > 0 and "collision" not in stats, (name, stats)
        assert verified[name]["results"] == cold[name]["results"], name
